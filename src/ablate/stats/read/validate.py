"""What every reader of a run directory checks before it trusts a value (issue 45): the one place
load.py and archive.py call for .hydra files, metrics.csv, runs.jsonl.gz and prompts.csv.gz (status.json's
and summary.json's checks stand beside their writers in ablate.rundir; samples.jsonl's line schema is
load.py's `_checked`). A damaged value is never used silently: each check returns what may be used and
appends one line per problem to `issues`, naming the file, what was wrong and what was done; the report
lists them under "Data problems" and the console counts them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablate.rundir.checks import bad_number, finite, show
from ablate.rundir.status import check_status
from ablate.rundir.summary import check_summary

__all__ = ["check_mapping", "check_overrides", "check_prompt_rows", "check_run_record", "check_status",
           "check_summary", "finite"]


def check_mapping(data, what: str, issues: list[str], done: str):
    """A YAML/JSON file that must hold a mapping (.hydra/config.yaml, hydra.yaml): else None, named."""
    if data is None or isinstance(data, dict):
        return data
    issues.append(f"{what}: holds a {type(data).__name__}, not a mapping; {done}")
    return None


def check_overrides(data, what: str, issues: list[str]) -> tuple[str, ...] | None:
    """.hydra/overrides.yaml: a list of `key=value` texts, else None (named)."""
    if data is None:
        return None
    if not isinstance(data, (list, tuple)) or not all(isinstance(x, str) for x in data):
        issues.append(f"{what}: not a list of overrides ({show(data)})")
        return None
    return tuple(str(x) for x in data)


_RECORD_TEXT = ("root", "name", "rel", "state", "outcome", "reason")
_RECORD_MAPS = ("status", "config", "summaries", "metrics", "sweeper_params")
OUTCOMES = ("ok", "failed", "running", "missing")


def check_run_record(record) -> str | None:
    """Why a runs.jsonl.gz line cannot be a run (None if it can); its status and summaries are cleaned
    in place (check_status, check_summary), their problems added to its `issues`."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a run record"
    for key in _RECORD_TEXT:
        if not isinstance(record.get(key), str):
            return f"`{key}` is {show(record.get(key))}, not text"
    if record["outcome"] not in OUTCOMES or not record["root"] or not record["name"] \
            or any(part in ("", ".", "..") or "/" in part for part in (record["root"], record["name"])):
        return f"outcome {show(record['outcome'])} or place {show(record['root'])}/{show(record['name'])} not valid"
    for key in ("overrides", "issues", "warnings"):
        if not isinstance(record.get(key), list) or not all(isinstance(x, str) for x in record[key]):
            return f"`{key}` is not a list of texts"
    if record.get("seed") is not None and (not isinstance(record["seed"], (str, int)) or isinstance(record["seed"], bool)):
        return f"seed {show(record['seed'])} is not text"
    for key in _RECORD_MAPS:
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"`{key}` is a {type(record[key]).__name__}, not an object"
    if (why := _bad_metrics(record.get("metrics"))) is not None:
        return f"metrics: {why}"
    record["seed"] = None if record.get("seed") is None else str(record["seed"])
    issues = record["issues"]
    record["status"] = check_status(record.get("status"), issues)
    summaries = record.get("summaries") or {}
    record["summaries"] = {k: check_summary(v, f"eval/{k}/summary.json", issues, True) for k, v in summaries.items()}
    return None


def _bad_metrics(metrics) -> str | None:
    if metrics is None:
        return None
    if not isinstance(metrics.get("step"), list):
        return "no `step` list"
    size = len(metrics["step"])
    for key, values in metrics.items():
        if not isinstance(values, list) or len(values) != size:
            return f"{key} is not a list of {size} values"
        if any(v is not None and bad_number(v) for v in values):
            return f"{key} holds a value that is not a finite number"
    return None


def check_prompt_rows(frame, what: str, problems: list[str]):
    """prompts.csv.gz's rows checked like samples.jsonl's lines (whole n >= 1, 0 <= n_correct <= n, other
    counts finite and >= 0 where given): (the frame, the (run, regime) pairs with a bad row: left out)."""
    keys = ["run", "regime", "id", "n", "n_correct"]
    if not set(keys) <= set(frame.columns):
        problems.append(f"{what}: columns {', '.join(k for k in keys if k not in frame.columns)} missing; "
                        "no run of this report has per-prompt counts, none is used")
        return frame.iloc[0:0], set()
    counts = [c for c in frame.columns if c not in ("run", "seed", "condition", "regime", "id")]
    numbers = {c: pd.to_numeric(frame[c], errors="coerce") for c in counts}
    given = {c: frame[c].notna() for c in counts}
    n, c = numbers["n"], numbers["n_correct"]
    bad = frame["run"].isna() | frame["regime"].isna() | frame["id"].isna() | ~(n >= 1) | (n % 1 != 0) \
        | ~((c >= 0) & (c <= n)) | (c % 1 != 0)
    for col in counts:
        bad |= given[col] & ~(np.isfinite(numbers[col]) & (numbers[col] >= 0))
    pairs = set(zip(frame.loc[bad, "run"], frame.loc[bad, "regime"]))
    if bad.any():
        rows = np.flatnonzero(bad.to_numpy())
        problems.append(f"{what}: {int(bad.sum())} bad row(s) (first data row {rows[0] + 1}: a count missing, "
                        f"not a number or out of range); {len(pairs)} run/regime table(s) with one left out")
    for col in counts:
        frame[col] = numbers[col]
    return frame, pairs
