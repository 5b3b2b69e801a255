"""Finding and loading run directories. Loading never raises on bad data: every problem becomes a
note on the run (or the sweep) so the report can name it; only a bad path given by the user raises
`StatsInputError`."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ablate.rundir import RunDir
from ablate.config.scale import scaled_block
from ablate.rundir.status import EFFECTIVE_BATCH, data_parallel
from ablate.tasks import OPERANDS, TASKS

# Directories a run writes that never contain other runs; skipping them keeps discovery fast.
_NO_DESCEND = {*RunDir.SUBDIRS, "wandb", "lightning_logs", "__pycache__", ".git"}
SEED_KEYS = {"seed"}
# Where a run ran, not what it trained: like the seed, never part of its condition, so a study may run some
# seeds on a GPU node and the rest on a laptop (`machines` puts them in the report, `unbalanced_machines`
# flags a machine that ran more of one condition than of another).
EXECUTION_KEYS = {"trainer.accelerator", "trainer.devices", "trainer.num_threads"}


def task_level(config: dict | None) -> tuple[str, str]:
    """(samples.jsonl column, summary block) of a run's report level, read from its task in the registry
    (`task.name` of its .hydra/config.yaml; Countdown's names, the operand count, when it names none known)."""
    task = (config or {}).get("task")
    known = TASKS.get(task.get("name")) if isinstance(task, dict) and isinstance(task.get("name"), str) else None
    return (known.level_column, known.level_block) if known is not None else OPERANDS


class StatsInputError(Exception):
    """A mistake in what the user asked for (bad path, unknown baseline or metric): exit code 2."""


@dataclass
class PromptTable:
    """Per-prompt counts of one run in one eval regime (one row per samples.jsonl line): `cols` holds
    n and n_correct, and each optional column of `ablate.metrics.prompt_ratios` (n_answered,
    mean_length, tool_calls, n_calc, verdict/<name>) and n_numbers when every line has it: the prompt's report
    level (its task's `level_column`, Countdown's operand count), broken down as `<level_block>/<level>/...`."""

    ids: np.ndarray  # object array of str
    cols: dict[str, np.ndarray]
    level_block: str = "by_operands"  # the run's task's (ablate.tasks: Task.level_block)

    @property
    def n(self) -> np.ndarray:
        return self.cols["n"]

    def __len__(self) -> int:
        return int(self.ids.size)


@dataclass
class RegimeEval:
    name: str
    path: Path
    prompts: PromptTable | None
    summary: dict | None
    issues: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.prompts is not None and len(self.prompts) > 0


@dataclass
class Run:
    path: Path
    rel: str  # path relative to the sweep root, for messages
    overrides: tuple[str, ...]
    condition: tuple[str, ...]  # normalised overrides without the seed
    seed: str | None
    state: str  # completed / running / interrupted / failed / unknown / <other>
    status: dict | None
    evals: dict[str, RegimeEval]
    metrics: "object | None"  # pandas.DataFrame indexed by step, or None
    issues: list[str] = field(default_factory=list)
    outcome: str = "missing"  # ok / failed / running / missing
    reason: str = ""
    config: dict | None = None  # the composed .hydra/config.yaml
    warnings: list[str] = field(default_factory=list)  # status.json "warnings" (e.g. a sampler that never engaged)
    sweeper_params: dict | None = None  # its sweep's hydra.sweeper.params (.hydra/hydra.yaml), for the next look

    @property
    def study(self) -> dict | None:
        """The run's study block, named after its model's scale (ablate.config.scale: a study run at
        model=small is its own study, never pooled with the tiny model's)."""
        block = (self.config or {}).get("study")
        return scaled_block(block, (self.config or {}).get("model") or {}) if isinstance(block, dict) else None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def label(self) -> str:
        return condition_label(self.condition)


@dataclass
class Sweep:
    roots: list[Path]
    runs: list[Run]
    never_started: list[tuple[tuple[str, ...], str | None, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "+".join(r.name for r in self.roots) or "sweep"

    def conditions(self) -> dict[tuple[str, ...], list[Run]]:
        out: dict[tuple[str, ...], list[Run]] = {}
        for run in sorted(self.runs, key=lambda r: (r.condition, _seed_key(r.seed), r.rel)):
            out.setdefault(run.condition, []).append(run)
        for cond, _, _ in self.never_started:
            out.setdefault(cond, [])
        return dict(sorted(out.items()))


def mixed_starts(runs: Sequence[Run]) -> list[str]:
    """One problem line per starting point that runs name alike (status.json `init`, by its last two path
    parts: an upstream's cache key and `model`, the same on every machine) but that gave them different
    weights (`init_sha256`): an upstream re-trained by other code, or on a CPU whose kernels round
    otherwise (AVX2 vs AVX512). Pooled, such runs are not seeds of one recipe. Runs from before the
    fingerprint was recorded say nothing."""
    seen: dict[str, dict[str, list[str]]] = {}
    for run in runs:
        status = run.status or {}
        init, sha = status.get("init"), status.get("init_sha256")
        if init and sha:
            seen.setdefault("/".join(Path(str(init)).parts[-2:]), {}).setdefault(sha, []).append(run.rel)
    problems = []
    for name, by_sha in seen.items():
        if len(by_sha) > 1:
            groups = "; ".join(f"{sha[:12]}: {', '.join(rels[:4])}{' ...' if len(rels) > 4 else ''}"
                               for sha, rels in by_sha.items())
            problems.append(f"runs that start from {name} started from {len(by_sha)} different weights "
                            f"(init_sha256 {groups}): the upstream was re-trained (other code, or another "
                            f"CPU's kernels), so these runs are not seeds of one recipe; report them apart")
    return problems


def machine(run: Run) -> str:
    """The machine a run ran on, as far as its files say: the composed trainer.accelerator and the torch
    build (with the CPU's kernel level on a CPU build), e.g. `gpu, torch 2.11.0` or `auto, torch 2.13.0+cpu, AVX2`."""
    trainer = (run.config or {}).get("trainer")
    accelerator = trainer.get("accelerator") if isinstance(trainer, dict) else None
    versions = (run.status or {}).get("versions")
    versions = versions if isinstance(versions, dict) else {}
    torch = str(versions.get("torch") or "?")
    parts = [str(accelerator or "?"), f"torch {torch}"]
    if torch.endswith("+cpu") and versions.get("cpu_capability"):
        parts.append(str(versions["cpu_capability"]))
    return ", ".join(parts)


def machines(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Usable runs by `machine`, the most runs first."""
    by: dict[str, list[Run]] = {}
    for run in runs:
        if run.ok:
            by.setdefault(machine(run), []).append(run)
    return dict(sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def unbalanced_machines(runs: Sequence[Run]) -> list[str]:
    """One problem line when the machines did not run the same number of seeds of every condition: then
    the machine (its rounding, its torch build) is confounded with the condition."""
    by = machines(runs)
    if len(by) < 2:
        return []
    conditions = sorted({r.condition for r in runs if r.ok})
    counts = {m: [sum(r.condition == c for r in rs) for c in conditions] for m, rs in by.items()}
    if all(len(set(n)) == 1 for n in counts.values()):
        return []
    shown = "; ".join(f"{m}: {min(n)}-{max(n)} runs a condition" for m, n in counts.items())
    return [f"the machines ran different numbers of seeds of the conditions ({shown}): the machine is "
            f"confounded with the condition; run every condition's seeds alike on each machine"]


def _seed_key(seed: str | None):
    if seed is None:
        return (1, 0, "")
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (0, math.inf, seed)


def condition_label(condition: Sequence[str]) -> str:
    return ",".join(condition) if condition else "(no overrides)"


def normalise_override(item: str) -> str:
    """`+key=v`, `++key=v` and `key = v` mean the same condition as `key=v`; Hydra's escapes
    (`builtin\\:tiny-sft` in a job's overrides.yaml, `builtin:tiny-sft` in multirun.yaml) too."""
    text = str(item).strip()
    key, sep, value = text.partition("=")
    key = key.strip().lstrip("+")
    value = re.sub(r"\\(.)", r"\1", value.strip())
    return f"{key}{sep}{value}" if sep else key


def override_key(item: str) -> str:
    return item.partition("=")[0]


def split_overrides(overrides: Iterable[str], status: dict | None = None) -> tuple[tuple[str, ...], str | None]:
    """(condition, seed): the sorted normalised overrides minus `seed=...` and the
    `EXECUTION_KEYS`, and the seed value. A data-parallel run (its `status` records a world size above 1)
    adds `effective_batch=<world size x per-device batch>`: trainer.devices is where a run ran, but under
    DDP it multiplies the batch, so runs at different world sizes are different conditions."""
    cond, seed = [], None
    for item in overrides:
        norm = normalise_override(item)
        if override_key(norm) in SEED_KEYS:
            seed = norm.partition("=")[2]
        elif override_key(norm) not in EXECUTION_KEYS:
            cond.append(norm)
    layout = data_parallel(status)
    if layout and layout[0] > 1:
        cond.append(f"{EFFECTIVE_BATCH}={layout[1]}")
    return tuple(sorted(set(cond))), seed


def find_run_dirs(root: Path) -> list[Path]:
    root = Path(root)
    if RunDir(root).is_run():
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and RunDir(here).is_run():
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in _NO_DESCEND)
    return sorted(found)


def _sweep_root_of(run_dir: Path, top: Path) -> Path:
    """Nearest ancestor with Hydra's multirun.yaml, else the run's parent."""
    for parent in run_dir.parents:
        if parent == top or top not in parent.parents:
            break
        if (parent / "multirun.yaml").is_file():
            return parent
    return run_dir.parent


def find_sweeps(multirun_root: Path) -> list[Path]:
    top = Path(multirun_root)
    roots = {_sweep_root_of(r, top) for r in find_run_dirs(top)}
    return sorted(roots)


def newest_sweep(multirun_root: Path = Path("multirun")) -> Path:
    top = Path(multirun_root)
    if not top.is_dir():
        raise StatsInputError(f"no sweep directory given and {top}/ does not exist "
                              "(pass a sweep directory, e.g. multirun/2025-01-01/12-00-00)")
    sweeps = find_sweeps(top)
    if not sweeps:
        raise StatsInputError(f"no sweep directory given and no runs found under {top}/ "
                              "(a run is a directory containing .hydra/overrides.yaml)")

    def mtime(p: Path) -> float:
        times = [p.stat().st_mtime]
        if (p / "multirun.yaml").is_file():
            times.append((p / "multirun.yaml").stat().st_mtime)
        return max(times)

    return max(sweeps, key=lambda p: (mtime(p), str(p)))
