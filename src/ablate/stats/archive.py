"""A report directory as a sweep: what `ablate.stats` needs of every run, committed beside the report,
so a later look pools with it and any later method re-analyses it without the run directories.

`runs.jsonl.gz` (one line per run: where it ran, overrides, seed, state, status.json, the composed
config, each regime's summary.json, the training curves as metrics.csv reads) and `prompts.csv.gz`
(every run's per-prompt counts) are written by `write_report`; `load_archive` turns them back into
`Run`s whose every value is the run directory's, bit for bit (floats go through repr, which round-trips):

    python -m ablate.stats docs/findings/dots_replay_study multirun/dots_replay_study_look2
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.stats.runs import PromptTable, RegimeEval, Run, split_overrides, task_level

RUNS_FILE = "runs.jsonl.gz"
PROMPTS_FILE = "prompts.csv.gz"
_KEYS = ["run", "seed", "condition", "regime", "id"]  # the per-prompt table's keys; every other column is a count


def is_archive(path: Path) -> bool:
    return (Path(path) / RUNS_FILE).is_file()


def root_of(path: Path, roots: list[Path]) -> Path:
    """The sweep directory a run directory lies under (the first, else its parent)."""
    for root in roots:
        try:
            Path(path).resolve().relative_to(Path(root).resolve())
            return Path(root)
        except ValueError:
            continue
    return Path(path).parent


def _finite(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _metrics_record(frame: pd.DataFrame | None) -> dict | None:
    if frame is None:
        return None
    cols = {"step": [_finite(v) for v in frame.index.tolist()]}
    cols.update({str(c): [_finite(v) for v in frame[c].tolist()] for c in frame.columns})
    return cols


def _metrics_frame(record: dict | None) -> pd.DataFrame | None:
    if record is None:
        return None
    steps = record.pop("step")
    frame = pd.DataFrame({k: np.asarray([math.nan if v is None else v for v in vals], dtype=np.float64)
                          for k, vals in record.items()})
    frame.index = pd.Index(steps, name="step")
    return frame


def run_record(run: Run, root: Path) -> dict:
    """One run as a JSON-able dict: `root` is the sweep directory it was loaded from (its name keeps the looks apart)."""
    return {"root": Path(root).name, "name": run.path.name, "rel": run.rel, "overrides": list(run.overrides),
            "seed": run.seed, "state": run.state, "outcome": run.outcome, "reason": run.reason,
            "issues": run.issues, "warnings": run.warnings, "status": run.status, "config": run.config,
            "summaries": {k: ev.summary for k, ev in run.evals.items()},
            "metrics": _metrics_record(run.metrics), "sweeper_params": run.sweeper_params}


def write_runs(runs: list[tuple[Run, Path]], out: Path) -> Path:
    """runs.jsonl.gz under `out`, atomically (a reader may be pooling it)."""
    from ablate.atomic import write_bytes

    text = "".join(json.dumps(run_record(run, root), allow_nan=False) + "\n" for run, root in runs)
    path = Path(out) / RUNS_FILE
    write_bytes(path, gzip.compress(text.encode("utf-8"), mtime=0))
    return path


def _prompt_tables(path: Path) -> dict[tuple[str, str], PromptTable]:
    """(run, regime) -> its PromptTable, from prompts.csv.gz (level column n_numbers, verdict_X -> verdict/X)."""
    if not path.is_file():
        return {}
    df = pd.read_csv(path, dtype={"run": str, "id": str, "seed": str, "condition": str, "regime": str})
    out = {}
    for (run, regime), part in df.groupby(["run", "regime"], sort=False):
        cols = {c.replace("verdict_", "verdict/", 1): part[c].to_numpy(dtype=np.float64)
                for c in part.columns if c not in _KEYS and part[c].notna().all()}
        out[(run, regime)] = PromptTable(part["id"].to_numpy(dtype=object), cols)
    return out


def load_archive(path: Path) -> tuple[list[Path], list[Run]]:
    """The sweep roots (one per sweep directory the report read, as `<archive>/<name>`) and the runs."""
    path = Path(path)
    prompts = _prompt_tables(path / PROMPTS_FILE)
    with gzip.open(path / RUNS_FILE, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    roots: list[Path] = []
    runs = []
    for r in records:
        root = path / r["root"]
        if root not in roots:
            roots.append(root)
        run_path = root / r["name"]
        block = task_level(r["config"])[1]
        evals = {}
        for regime, summary in (r["summaries"] or {}).items():
            table = prompts.get((r["rel"], regime))
            if table is not None:
                table.level_block = block
            evals[regime] = RegimeEval(regime, run_path / "eval" / regime, table, summary)
        condition, _ = split_overrides(r["overrides"])
        runs.append(Run(run_path, r["rel"], tuple(r["overrides"]), condition, r["seed"], r["state"], r["status"],
                        evals, _metrics_frame(r["metrics"]), list(r["issues"]), outcome=r["outcome"],
                        reason=r["reason"], config=r["config"], warnings=list(r["warnings"]),
                        sweeper_params=r.get("sweeper_params")))
    return roots, runs
