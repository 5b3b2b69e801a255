"""Hydra's `multirun.yaml` in a sweep directory, its record of the jobs the sweep launched or was to launch:
a job with no run directory never started. The record is checked as every file a report reads is: one
that does not read, is not the shape Hydra writes, does not list the runs found beside it, or is missing
where those runs say a sweep launched them, is named in the sweep's warnings (and then no job is
reported as never started from it)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml
from hydra.errors import HydraException

from ablate.rundir import RunDir
from ablate.stats.read.runs import Sweep, normalise_override, split_overrides
from ablate.stats.read.samples import MAX_SMALL_FILE, short
from hydra_plugins.ablate_sweeper.grid_sweeper import sweep_jobs

MULTIRUN_FILE = "multirun.yaml"
NOT_TOLD = "cannot tell which jobs never started"


def _job(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(normalise_override(o) for o in overrides))


def expected_jobs(path: Path, warnings: list[str]) -> list[tuple[str, ...]] | None:
    """Every job the sweep launched or was to launch, expanded by the sweeper Hydra ran (the grid
    sweeper, or the basic sweeper it is without `grids`): range(), grids, the command line. None where
    the record does not tell (named in `warnings` when it is damaged)."""
    try:
        if path.stat().st_size > MAX_SMALL_FILE:
            warnings.append(f"{path}: {path.stat().st_size / 2**20:.0f} MB, far larger than Hydra writes it; not read; "
                            f"{NOT_TOLD}")
            return None
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        warnings.append(f"{path}: unreadable ({short(exc)}); {NOT_TOLD}")
        return None
    hydra = cfg.get("hydra") if isinstance(cfg, dict) else None
    overrides = hydra.get("overrides") if isinstance(hydra, dict) else None
    task = overrides.get("task") if isinstance(overrides, dict) else None
    sweeper = hydra.get("sweeper") or {} if isinstance(hydra, dict) else None
    if not (isinstance(task, list) and all(isinstance(t, str) for t in task) and isinstance(sweeper, dict)):
        warnings.append(f"{path}: not the record Hydra writes (hydra.overrides.task a list of overrides, "
                        f"hydra.sweeper a mapping); {NOT_TOLD}")
        return None
    if not (task or sweeper.get("params") or sweeper.get("grids")):
        return None
    try:
        jobs = sweep_jobs(sweeper.get("params"), sweeper.get("grids"), task)
    except (HydraException, ValueError, TypeError, AttributeError) as exc:
        warnings.append(f"{path}: its sweep does not expand ({short(exc)}); {NOT_TOLD}")
        return None
    return [_job(job) for job in jobs]


def launched_by_sweep(run_dir: Path) -> bool:
    """Whether Hydra's record of the run (.hydra/hydra.yaml) says a sweep (`-m`) launched it."""
    try:
        data = yaml.safe_load(RunDir(run_dir).hydra_file("hydra.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # its own damage is the run's issue (ablate.stats.read.load)
    hydra = data.get("hydra") if isinstance(data, dict) else None
    return isinstance(hydra, dict) and str(hydra.get("mode")) in ("MULTIRUN", "RunMode.MULTIRUN")


def check_sweep_record(root: Path, sweep: Sweep) -> None:
    """The jobs `root`'s multirun.yaml lists that have no run directory (`sweep.never_started`), and the
    record's damage (`sweep.warnings`)."""
    path = root / MULTIRUN_FILE
    here = [run for run in sweep.runs if root in run.path.parents]
    if not path.is_file():
        if any(run.path.parent == root and launched_by_sweep(run.path) for run in here):
            sweep.warnings.append(f"{root}/{MULTIRUN_FILE}: missing, though its runs were launched by a sweep "
                                  f"(their .hydra/hydra.yaml says so); {NOT_TOLD}")
        return
    expected = expected_jobs(path, sweep.warnings)
    if expected is None:
        return
    listed = set(expected)
    unlisted = [run for run in here if run.overrides and _job(run.overrides) not in listed]
    if unlisted:
        sweep.warnings.append(f"{path}: lists {len(expected)} job(s), not the {len(unlisted)} run(s) here such as "
                              f"{unlisted[0].rel} ({' '.join(unlisted[0].overrides)}): the record or their overrides "
                              "are damaged, or they are from another launch into this directory")
    have = {_job(run.overrides) for run in sweep.runs}
    for combo in expected:
        if combo not in have:
            cond, seed = split_overrides(combo)
            sweep.never_started.append((cond, seed, f"no run directory for {' '.join(combo)} (expected from "
                                                    f"{MULTIRUN_FILE})"))
