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

from ablate.rundir import RunDir
from ablate.rundir.atomic import write_bytes
from ablate.stats.read.runs import PromptTable, RegimeEval, Run, split_overrides, task_level
from ablate.stats.read.validate import check_prompt_rows, check_run_record, finite

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
    # a NaN/inf that reached a run's status or config (YAML has .nan) is null in JSON, never a crash
    text = "".join(json.dumps(finite(run_record(run, root), "", []), allow_nan=False) + "\n" for run, root in runs)
    path = Path(out) / RUNS_FILE
    write_bytes(path, gzip.compress(text.encode("utf-8"), mtime=0))
    return path


def _prompt_tables(path: Path, problems: list[str]) -> dict[tuple[str, str], PromptTable]:
    """(run, regime) -> its PromptTable, from prompts.csv.gz (level column n_numbers, verdict_X -> verdict/X).
    A (run, regime) with a damaged row is left out whole, and named."""
    if not path.is_file():
        return {}
    try:
        df = pd.read_csv(path, dtype={"run": str, "id": str, "seed": str, "condition": str, "regime": str})
    except Exception as exc:  # noqa: BLE001 - gzip, the decoder and pandas raise many types for damaged files
        problems.append(f"{path.name}: unreadable ({str(exc).strip()[:160] or type(exc).__name__}); "
                        "no run of this report has per-prompt counts, none is used")
        return {}
    df, bad = check_prompt_rows(df, path.name, problems)
    out = {}
    for (run, regime), part in df.groupby(["run", "regime"], sort=False):
        if (run, regime) in bad:
            continue
        cols = {c.replace("verdict_", "verdict/", 1): part[c].to_numpy(dtype=np.float64)
                for c in part.columns if c not in _KEYS and part[c].notna().all()}
        out[(run, regime)] = PromptTable(part["id"].to_numpy(dtype=object), cols)
    return out


def _records(path: Path, problems: list[str]) -> list[dict]:
    """runs.jsonl.gz's records that pass validate.check_run_record; a damaged file is read up to the damage."""
    lines: list[str] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                lines.append(line)
    except Exception as exc:  # noqa: BLE001 - gzip, zlib and the decoder raise many types for damaged files
        problems.append(f"{path.name}: damaged after {len(lines)} line(s) ({str(exc).strip()[:120] or type(exc).__name__}); "
                        "the runs after it are not read")
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            problems.append(f"{path.name}: line {i} is not JSON; that run is not read")
            continue
        if (why := check_run_record(record)) is not None:
            problems.append(f"{path.name}: line {i}: {why}; that run is not read")
            continue
        records.append(record)
    return records


def load_archive(path: Path, problems: list[str] | None = None) -> tuple[list[Path], list[Run]]:
    """The sweep roots (one per sweep directory the report read, as `<archive>/<name>`) and the runs.
    Damage is never used: each problem goes to `problems`, naming the file and what was left out."""
    path = Path(path)
    problems = [] if problems is None else problems
    prompts = _prompt_tables(path / PROMPTS_FILE, problems)
    roots: list[Path] = []
    runs = []
    for r in _records(path / RUNS_FILE, problems):
        root = path / r["root"]
        if root not in roots:
            roots.append(root)
        runs.append(_run(r, root / r["name"], prompts))
    return roots, runs


def _run(r: dict, run_path: Path, prompts: dict) -> Run:
    block = task_level(r["config"])[1]
    evals = {}
    for regime, summary in (r["summaries"] or {}).items():
        table = prompts.get((r["rel"], regime))
        if table is not None:
            table.level_block = block
        evals[regime] = RegimeEval(regime, RunDir(run_path).eval_dir(regime), table, summary)
    condition, _ = split_overrides(r["overrides"], r["status"] if isinstance(r["status"], dict) else None)
    run = Run(run_path, r["rel"], tuple(r["overrides"]), condition, r["seed"], r["state"], r["status"],
              evals, _metrics_frame(r["metrics"]), list(r["issues"]), outcome=r["outcome"],
              reason=r["reason"], config=r["config"], warnings=list(r["warnings"]),
              sweeper_params=r.get("sweeper_params"))
    if run.ok and not any(ev.usable for ev in evals.values()):
        run.outcome, run.reason = "missing", f"{PROMPTS_FILE} has no usable per-prompt counts for it; left out"
    return run
