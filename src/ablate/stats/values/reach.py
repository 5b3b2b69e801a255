"""Steps to reach: the one definition the claims (`reach:COLUMN>=VALUE`, ablate.stats.values.table) and the
report's reach table (`--reach`, ablate.stats.stages.curves) both use.

A target is `COLUMN OP VALUE` with OP `>=`, `<=` or `=` (meaning `>=`) and VALUE a number; a claim
writes it after `reach:` (steps) or `reach_time:` (seconds) and may name `baseline` as VALUE (the
mean over the claim's baseline seeds of final:COLUMN at its first look, resolved by the engine).

A run reaches the target at the first logged step whose value (a running mean over `window` logged
points, 1: the values themselves) is on the target's side of VALUE. A run that never does counts as
reaching at its last logged step: censored, never dropped, so the slow seeds stay in the mean (the
restricted mean). Its elapsed seconds are the last clock reading at or before that step.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from ablate.stats.read.runs import StatsInputError

# the clock of a run's metrics.csv: the project's own column first, then older or foreign names
TIME_COLUMNS = ("time/elapsed_s", "elapsed_s", "time/elapsed", "wall_time_s", "time_s")
_TARGET = re.compile(r"^\s*(.+?)\s*(>=|<=|=)\s*(\S+)\s*$")
_CLAIM = re.compile(r"^reach(_time|_cpu)?:(.+)$")
CPU_COLUMN = "time/cpu_s"  # the process's CPU seconds (ablate.lit.elapsed): `reach_cpu:`'s clock
BASELINE = "baseline"


class Target(NamedTuple):
    column: str
    op: str  # ">=" or "<="
    value: float | str  # a number, or BASELINE (claims only)
    time: bool = False  # seconds to reach (reach_time: wall, reach_cpu: CPU) rather than steps
    cpu: bool = False  # reach_cpu: CPU seconds (time/cpu_s), the cost a shared machine's load does not inflate


def _target(spec: str, baseline: bool) -> Target | str:
    """The target `spec` names, or why it names none."""
    m = _TARGET.match(spec)
    if not m:
        return "expects COLUMN>=VALUE, COLUMN<=VALUE or COLUMN=VALUE"
    op, text = (">=" if m.group(2) == "=" else m.group(2)), m.group(3)
    if baseline and text == BASELINE:
        return Target(m.group(1), op, BASELINE)
    try:
        value = float(text)
    except ValueError:
        return f"{text!r} is not a number"
    return f"{text!r} is not a number" if math.isnan(value) else Target(m.group(1), op, value)


def parse_reach(spec: str) -> Target:
    """A `--reach` option's target; one clear line naming the bad value otherwise."""
    found = _target(spec, baseline=False)
    if isinstance(found, str):
        raise StatsInputError(f"--reach {spec!r}: {found} (e.g. --reach val/pass@1>=0.4)")
    return found


def reach_metric(metric: str) -> Target | None:
    """The target of a claim's `reach:` / `reach_time:` / `reach_cpu:` metric; None for any other metric name."""
    m = _CLAIM.match(metric)
    found = None if m is None else _target(m.group(2), baseline=True)
    return found._replace(time=bool(m.group(1)), cpu=m.group(1) == "_cpu") if isinstance(found, Target) else None


def smoothed(series: pd.Series, window: int) -> pd.Series:
    """The logged values of a column, as a running mean over `window` of them (at most all of them)."""
    s = series.dropna()
    if window <= 1:
        return s
    w = min(window, len(s))
    return s.rolling(window=w, min_periods=w).mean().dropna()


def time_column(frame: pd.DataFrame) -> str | None:
    for c in TIME_COLUMNS:
        if c in frame.columns:
            return c
    return next((c for c in frame.columns if c.endswith("elapsed_s")), None)


class Reached(NamedTuple):
    step: float  # the first step reaching the target, else the run's last logged step (censored)
    time_s: float  # elapsed seconds at that step; NaN without a clock
    reached: bool


def first_reach(frame: pd.DataFrame | None, column: str, op: str, threshold: float,
                window: int = 1, clock: str | None = None) -> Reached | None:
    """When one run (its metrics.csv, indexed by step) reaches `column OP threshold`, censored at its
    last logged step; None when the run logs no value of `column` or the threshold is NaN."""
    if frame is None or column not in frame.columns or math.isnan(threshold) or frame[column].isna().all():
        return None
    values = smoothed(frame[column], window)
    hit = values >= threshold if op == ">=" else values <= threshold
    reached = bool(hit.any())
    step = hit.idxmax() if reached else frame.index.max()
    clock = clock if clock is not None else time_column(frame)
    ticks = frame[clock].loc[:step].dropna() if clock in frame.columns else ()
    return Reached(float(step), float(ticks.iloc[-1]) if len(ticks) else math.nan, reached)


def restricted_reach(frame: pd.DataFrame | None, column: str, op: str, threshold: float,
                     time: bool = False, window: int = 1) -> float:
    """`first_reach`'s step (with `time`, its seconds) as one number; NaN when it has none."""
    found = first_reach(frame, column, op, threshold, window)
    return math.nan if found is None else (found.time_s if time else found.step)


def final_mean(frames, column: str, window: int) -> float | None:
    """The mean over runs of each one's last (running-mean) value of `column`: a baseline's final
    value as a threshold. None when no run logs it."""
    ends = [smoothed(f[column], window) for f in frames if f is not None and column in f.columns]
    ends = [e.iloc[-1] for e in ends if len(e)]
    return float(np.mean(ends)) if ends else None
