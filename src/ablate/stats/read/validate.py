"""What every reader of a run directory checks before it trusts a value (issue 45): the one place
load.py and archive.py call for status.json, summary.json, .hydra files, metrics.csv, runs.jsonl.gz and
prompts.csv.gz (samples.jsonl's line schema is load.py's `_checked`). A damaged value is never used
silently: each check returns what may be used and appends one line per problem to `issues`, naming the
file, what was wrong and what was done; the report lists them under "Data problems" and the console
counts them."""

from __future__ import annotations

import math
import re

# summary.json's leaves by what they may hold: shares of samples or prompts in [0, 1], whole counts >= 0,
# other non-negative numbers. Keys outside these are any finite number, or text.
_RATE = re.compile(r"^(pass[@^]\d+|exact_pass@\d+|coverage|precision|mixed_fraction|best_of_n|.*_rate|.*_frac(tion)?)$")
_COUNT = re.compile(r"^(n_prompts|n_samples|tool_errors|attempts|pid)$")
_NONNEGATIVE = re.compile(r"^(mean_response_length|calls_per_rollout|.*_s)$")
STATES = ("completed", "running", "interrupted", "failed")


def bad_number(key: str, value, counts_parent: bool = False) -> str | None:
    """Why `value` cannot be `key`'s value (None if it can): not a number, not finite, out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {_show(value)} where a number belongs"
    if not math.isfinite(value):
        return f"{value} (not a finite number)"
    if (counts_parent or _COUNT.match(key)) and (value < 0 or not float(value).is_integer()):
        return f"{value!r} (a count must be a whole number >= 0)"
    if _RATE.match(key) and not 0 <= value <= 1:
        return f"{value!r} (a share must lie in [0, 1])"
    if _NONNEGATIVE.match(key) and value < 0:
        return f"{value!r} (must be >= 0)"
    return None


def _show(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_summary(summary, what: str, issues: list[str], recomputable: bool) -> dict | None:
    """summary.json without the values it may not hold (dropped, each named). `recomputable`: the
    regime's samples.jsonl is readable, so the report's value of a dropped metric comes from it."""
    if summary is None:
        return None
    if not isinstance(summary, dict):
        issues.append(f"{what}: a JSON {type(summary).__name__}, not an object; not used")
        return None
    dropped: list[str] = []
    clean = _clean_summary(summary, "", dropped, counts=False)
    if dropped:
        done = ("dropped; the report recomputes these from samples.jsonl" if recomputable
                else "dropped; the report leaves them out")
        issues.append(f"{what}: {len(dropped)} bad value(s): {'; '.join(dropped[:4])}"
                      f"{' and more' if len(dropped) > 4 else ''}; {done}")
    return clean


def _clean_summary(block: dict, prefix: str, dropped: list[str], counts: bool) -> dict:
    out = {}
    for key, value in block.items():
        name = f"{prefix}{key}"
        known = counts or bool(_RATE.match(key) or _COUNT.match(key) or _NONNEGATIVE.match(key))
        if isinstance(value, dict) and not known:
            out[key] = _clean_summary(value, name + "/", dropped, counts=key == "verdicts")
        elif not known and (value is None or isinstance(value, (str, list))):
            out[key] = value  # text and lists: the regime's name and the like
        elif (why := bad_number(key, value, counts)) is not None:
            dropped.append(f"{name} is {why}")
        else:
            out[key] = value
    return out


def finite(obj, where: str, found: list[str]):
    """`obj` with every NaN or infinite number replaced by None (JSON has none), each place in `found`."""
    if isinstance(obj, dict):
        return {k: finite(v, f"{where}/{k}" if where else str(k), found) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v, f"{where}[{i}]", found) for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(f"{where or 'value'} is {obj}")
        return None
    return obj


def check_status(status, issues: list[str]) -> dict | None:
    """status.json as far as it can be trusted: an object, `state` one of STATES (text), no NaN/inf."""
    if status is None:
        return None
    if not isinstance(status, dict):
        issues.append(f"status.json: a JSON {type(status).__name__}, not an object; not used (state unknown)")
        return None
    found: list[str] = []
    status = finite(status, "", found)
    if found:
        issues.append(f"status.json: {'; '.join(found[:4])}; read as absent (null)")
    state = status.get("state")
    if not isinstance(state, str) or state not in STATES:
        issues.append(f"status.json: state {_show(state)} is not one of {', '.join(STATES)}; the run is not "
                      "counted as completed")
    for key in ("error", "init", "init_sha256", "started_at", "heartbeat_at", "host"):
        if status.get(key) is not None and not isinstance(status[key], str):
            issues.append(f"status.json: {key} is {_show(status[key])}, not text; ignored")
            status = {**status, key: None}
    for key in ("duration_s", "total_duration_s", "attempts", "pid"):
        if status.get(key) is not None and bad_number(key, status[key]) is not None:
            issues.append(f"status.json: {key} is {bad_number(key, status[key])}; ignored")
            status = {**status, key: None}
    for key in ("history", "warnings"):
        if status.get(key) is not None and not isinstance(status[key], (list, str)):
            issues.append(f"status.json: {key} is {_show(status[key])}, not a list; ignored")
            status = {**status, key: None}
    if status.get("takeover") is not None and not isinstance(status["takeover"], dict):
        issues.append(f"status.json: takeover is {_show(status['takeover'])}, not an object; ignored")
        status = {**status, "takeover": None}
    return status


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
        issues.append(f"{what}: not a list of overrides ({_show(data)})")
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
            return f"`{key}` is {_show(record.get(key))}, not text"
    if record["outcome"] not in OUTCOMES or not record["root"] or not record["name"] \
            or any(part in ("", ".", "..") or "/" in part for part in (record["root"], record["name"])):
        return f"outcome {_show(record['outcome'])} or place {_show(record['root'])}/{_show(record['name'])} not valid"
    for key in ("overrides", "issues", "warnings"):
        if not isinstance(record.get(key), list) or not all(isinstance(x, str) for x in record[key]):
            return f"`{key}` is not a list of texts"
    if record.get("seed") is not None and (not isinstance(record["seed"], (str, int)) or isinstance(record["seed"], bool)):
        return f"seed {_show(record['seed'])} is not text"
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
        if any(v is not None and bad_number("", v) for v in values):
            return f"{key} holds a value that is not a finite number"
    return None


def check_prompt_rows(frame, what: str, problems: list[str]):
    """prompts.csv.gz's rows checked like samples.jsonl's lines (whole n >= 1, 0 <= n_correct <= n, other
    counts finite and >= 0 where given): (the frame, the (run, regime) pairs with a bad row: left out)."""
    import numpy as np
    import pandas as pd

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
