"""`hydra/sweeper=grids`: Hydra's basic sweeper over a union of grids.

A study whose conditions do not form one Cartesian product (paper 000's RLOO curricula plus its IPO
control) lists each product under `hydra.sweeper.grids`; `params` and the command line's overrides
apply to every grid. The jobs are the union, in order, duplicates dropped, so one command fills
one sweep directory and one report:

    hydra:
      sweeper:
        params: {seed: range(5)}
        grids:
          - {curriculum: "none,static,frontier"}
          - {stage: ipo, curriculum: "static,null"}

Without `grids` it is the basic sweeper. A command-line override of a key a grid sets replaces the
grid's value in every grid (the command line wins, as everywhere in Hydra).

The jobs run seed-major: every arm's seed s before any arm's seed s+1 (a stable sort on `seed`, arms in
their grid order within a seed), so load that changes over a sweep's hours hits every arm alike instead of
one block of arms after another (Hydra's product order runs `curriculum=a,b seed=0,1` as a0 a1 b0 b1).
It is the default sweeper of every `-m` run (conf/config.yaml).
"""

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.ablate_sweeper.grid_sweeper.GridSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    grids: List[Dict[str, str]] = field(default_factory=list)


ConfigStore.instance().store(group="hydra/sweeper", name="grids", node=GridSweeperConf, provider="ablate")


class GridSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None,
                 grids: Optional[List[Dict[str, str]]] = None) -> None:
        super().__init__(max_batch_size, params)
        self.grids = [dict(g) for g in grids or []] or [{}]

    def jobs(self, arguments: List[str]) -> List[List[str]]:
        """Every job's overrides: the union over grids of params x grid x command line."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        command_line = parser.parse_overrides(arguments)
        given = {o.get_key_element() for o in command_line}
        jobs: List[List[str]] = []
        seen: set = set()
        for grid in self.grids:
            merged = {**(self.params or {}), **grid}
            spec = [f"{k}={v}" for k, v in merged.items() if _key(k) not in given]
            for job in self.split_arguments(parser.parse_overrides(spec) + command_line, None)[0]:
                if tuple(job) not in seen:
                    seen.add(tuple(job))
                    jobs.append(job)
        return sorted(jobs, key=_seed_order)  # stable: the grids' order within one seed

    def sweep(self, arguments: List[str]) -> Any:
        jobs = self.jobs(arguments)
        # The basic sweeper's loop over batches, fed with the union instead of one product.
        self.split_arguments = lambda _overrides, size: list(self.split_overrides_to_chunks(jobs, size))  # type: ignore
        return super().sweep([])


def sweep_jobs(params: Optional[Dict[str, str]], grids: Optional[List[Dict[str, str]]],
               arguments: List[str]) -> List[List[str]]:
    """The jobs a sweep launches, outside a Hydra run (a report reading multirun.yaml, a test): without
    a config loader, so `glob()` over config groups does not expand here."""
    sweeper = GridSweeper(None, params, grids)
    sweeper.hydra_context = SimpleNamespace(config_loader=None)
    return sweeper.jobs(arguments)


def _key(spec: str) -> str:
    return spec.lstrip("+~")


def _seed_order(job: List[str]) -> tuple:
    """A job's place in the seed-major order: its `seed` value (numbers before other strings; no seed first)."""
    value = next((o.split("=", 1)[1] for o in job if _key(o.split("=", 1)[0]) == "seed"), None)
    if value is None:
        return (0, 0, "")
    try:
        return (1, float(value), "")
    except ValueError:
        return (2, 0, value)
