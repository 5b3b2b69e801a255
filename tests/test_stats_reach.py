"""Steps to reach has one definition (ablate.stats.values.reach): a claim's `reach:` metric and the report's
reach table (`--reach`, the baseline's final value) parse one grammar and measure one way."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ablate.stats.read.runs import StatsInputError
from ablate.stats.stages.curves import reach_table
from ablate.stats.stages.settings import Settings
from ablate.stats.values.reach import Target, first_reach, parse_reach, reach_metric
from ablate.stats.values.table import is_curve_metric, reach_values


def _frame(values, steps=None, clock=None) -> pd.DataFrame:
    steps = list(range(0, 10 * len(values), 10)) if steps is None else steps
    frame = pd.DataFrame({"val/pass@1": values}, index=pd.Index(steps, name="step"))
    if clock is not None:
        frame["time/elapsed_s"] = clock
    return frame


def test_one_grammar_for_claims_and_the_reach_option():
    assert reach_metric("reach:val/pass@1>=0.4") == parse_reach("val/pass@1>=0.4") == Target("val/pass@1", ">=", 0.4)
    assert parse_reach(" train/loss = 2 ") == Target("train/loss", ">=", 2.0)  # `=` means >=
    assert reach_metric("reach:train/loss<=2") == parse_reach("train/loss<=2")
    assert reach_metric("reach_time:val/pass@1>=baseline") == Target("val/pass@1", ">=", "baseline", time=True)
    assert reach_metric("final:val/pass@1") is None and reach_metric("reach:val/pass@1>=nan") is None
    assert is_curve_metric("reach:val/pass@1>=0.4") and not is_curve_metric("pass@1")
    for bad, named in (("val/pass@1~0.4", "COLUMN>=VALUE"), ("val/pass@1>=baseline", "'baseline'"),
                       ("val/pass@1>=nan", "'nan'"), ("val/pass@1>=high", "'high'")):
        with pytest.raises(StatsInputError, match=named):
            parse_reach(bad)


def test_first_reach_is_censored_at_the_last_logged_step_with_its_clock():
    frame = _frame([0.30, np.nan, 0.33, 0.36, 0.35], steps=[0, 5, 10, 20, 40], clock=[0.0, 10.0, 20.0, 40.0, 80.0])
    assert first_reach(frame, "val/pass@1", ">=", 0.34) == (20.0, 40.0, True)
    assert first_reach(frame, "val/pass@1", ">=", 0.50) == (40.0, 80.0, False)  # never: the horizon
    assert first_reach(frame, "val/pass@1", "<=", 0.30) == (0.0, 0.0, True)
    # a running mean over 2 logged points first reaches 0.35 at step 40 ((0.36 + 0.35) / 2; 0.345 at 20)
    assert first_reach(frame, "val/pass@1", ">=", 0.35, window=2).step == 40.0
    assert math.isnan(first_reach(frame.drop(columns="time/elapsed_s"), "val/pass@1", ">=", 0.34).time_s)
    # not measured is not censored: no such column, no logged value, or no threshold
    assert first_reach(frame, "val/other", ">=", 0.3) is None
    assert first_reach(frame.assign(**{"val/pass@1": np.nan}), "val/pass@1", ">=", 0.3) is None
    assert first_reach(frame, "val/pass@1", ">=", math.nan) is None


def test_a_claims_reach_values_are_the_reach_tables_run_rows():
    """The same runs, the same threshold: the claims' per-run values and the report's reach.csv rows."""
    ends = {("curriculum=none",): (0.30, 0.35, 0.40), ("curriculum=static",): (0.50, 0.36, 0.20)}
    runs = {cond: [SimpleNamespace(rel=f"{cond[0]}/{seed}", seed=seed, condition=cond, label=cond[0], ok=True,
                                   status={}, path=None, metrics=_frame(np.linspace(0.1, end, 12), clock=np.arange(12) * 3.0))
                   for seed, end in enumerate(finals)] for cond, finals in ends.items()}
    labels = {c: c[0] for c in runs}
    base = ("curriculum=none",)
    table = reach_table(runs, labels, {(c, None): base for c in runs}, Settings(), notes := [])
    assert not notes and set(table["metric"]) == {"val/pass@1"}
    threshold = float(table["threshold"].iloc[0])
    sweep = SimpleNamespace(runs=[r for rs in runs.values() for r in rs], roots=[])
    for metric, column in (("reach:val/pass@1>=baseline", "step"), ("reach_time:val/pass@1>=baseline", "time_s")):
        claims = reach_values(_one_root(sweep), labels, metric, threshold).set_index("run")["value"]
        rows = table[table["level"] == "run"].set_index("run")[column]
        assert claims.sort_index().tolist() == rows.sort_index().tolist()
    runs_rows = table[table["level"] == "run"]
    assert threshold == pytest.approx(0.35) and runs_rows["reached"].tolist() == [False, True, True, True, True, False]


def _one_root(sweep):
    """reach_values batches runs by their sweep directory: one directory here."""
    from pathlib import Path

    root = Path("/nonexistent/sweep")
    for run in sweep.runs:
        run.path = root / run.rel
    sweep.roots = [root]
    return sweep


def test_reach_cpu_reads_the_processes_cpu_seconds_not_the_wall_clock():
    assert reach_metric("reach_cpu:val/pass@1>=baseline") == Target("val/pass@1", ">=", "baseline", time=True, cpu=True)
    frame = _frame([0.30, 0.33, 0.36], clock=[0.0, 50.0, 100.0])  # wall seconds under a varying load
    frame["time/cpu_s"] = [0.0, 20.0, 40.0]
    assert first_reach(frame, "val/pass@1", ">=", 0.34).time_s == 100.0
    assert first_reach(frame, "val/pass@1", ">=", 0.34, clock="time/cpu_s").time_s == 40.0
    assert math.isnan(first_reach(frame.drop(columns="time/cpu_s"), "val/pass@1", ">=", 0.34, clock="time/cpu_s").time_s)
