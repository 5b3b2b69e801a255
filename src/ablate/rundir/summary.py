"""`eval/<regime>/summary.json`'s shape, owned here: its top-level keys, the kinds of number its leaves
hold, and the reader's check (`check_summary`). The writer (ablate.eval) names its keys from here.

    {"regime": ..., "n_prompts": P, "n_samples": N, <metric>: value, ...,  the metrics of ablate.metrics
     "verdicts": {<verdict>: count, ...},                                  counts of the task's verdicts
     "by_<level>": {<level value>: {"n_prompts": ..., <metric>: ...}},    the task's report level's blocks
     "tool": {<tool metric>: value, ..., "tool_errors": count}}           under a tool
"""

from __future__ import annotations

import re
from typing import Any

from ablate.rundir.checks import COUNT, NONNEGATIVE, RATE, bad_number

REGIME, N_PROMPTS, N_SAMPLES, VERDICTS, TOOL, TOOL_ERRORS = \
    "regime", "n_prompts", "n_samples", "verdicts", "tool", "tool_errors"
BY = "by_"  # a level block: by_<level>

# the leaves by what they may hold: shares of samples or prompts in [0, 1], whole counts >= 0, other
# non-negative numbers. Keys outside these are any finite number, or text.
_KINDS = {
    RATE: re.compile(r"^(pass[@^]\d+|exact_pass@\d+|coverage|precision|mixed_fraction|best_of_n|.*_rate"
                     r"|.*_frac(tion)?)$"),
    COUNT: re.compile(r"^(n_prompts|n_samples|tool_errors|attempts|pid)$"),
    NONNEGATIVE: re.compile(r"^(mean_response_length|calls_per_rollout|.*_s)$"),
}


def kind_of(key: str) -> str | None:
    """The kind of number a summary.json leaf called `key` holds (None: any finite number)."""
    return next((kind for kind, pattern in _KINDS.items() if pattern.match(key)), None)


def check_summary(summary: Any, what: str, issues: list[str], recomputable: bool) -> dict | None:
    """summary.json without the values it may not hold (dropped, each named). `recomputable`: the
    regime's samples.jsonl is readable, so the report's value of a dropped metric comes from it."""
    if summary is None:
        return None
    if not isinstance(summary, dict):
        issues.append(f"{what}: a JSON {type(summary).__name__}, not an object; not used")
        return None
    dropped: list[str] = []
    clean = _clean(summary, "", dropped, counts=False)
    if dropped:
        done = ("dropped; the report recomputes these from samples.jsonl" if recomputable
                else "dropped; the report leaves them out")
        issues.append(f"{what}: {len(dropped)} bad value(s): {'; '.join(dropped[:4])}"
                      f"{' and more' if len(dropped) > 4 else ''}; {done}")
    return clean


def _clean(block: dict, prefix: str, dropped: list[str], counts: bool) -> dict:
    out = {}
    for key, value in block.items():
        name = f"{prefix}{key}"
        kind = COUNT if counts else kind_of(key)
        if isinstance(value, dict) and kind is None:
            out[key] = _clean(value, name + "/", dropped, counts=key == VERDICTS)
        elif kind is None and (value is None or isinstance(value, (str, list))):
            out[key] = value  # text and lists: the regime's name and the like
        elif (why := bad_number(value, kind)) is not None:
            dropped.append(f"{name} is {why}")
        else:
            out[key] = value
    return out
