"""The curves stage: training curves (metrics.csv averaged over seeds, with t-interval bands) and steps
to reach a threshold (as ablate.stats.values.reach defines it), per run and per condition. `training_curves`
returns them as `Curves`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ablate.rundir.metrics_csv import TRAIN, VAL
from ablate.stats.maths.intervals import nanmean, t_interval
from ablate.stats.values.reach import final_mean, first_reach, parse_reach

if TYPE_CHECKING:
    from ablate.stats.stages.conditions import Conditions
    from ablate.stats.stages.settings import Settings

DEFAULT_REACH_METRIC = "train/reward_mean"
# held-out pass@1 on the fixed validation subset, logged every eval.every steps
VAL_REACH_METRIC = "val/pass@1"


TRAIN_CAVEAT = "training reward: not a skill measure (easier batches reach it sooner)"

CURVE_COLUMNS = ["condition", "metric", "step", "mean", "ci_low", "ci_high", "n_seeds"]


@dataclass(frozen=True)
class Curves:
    """Every condition's training curves and its steps to reach a threshold."""

    table: pd.DataFrame  # curves.csv.gz (CURVE_COLUMNS): per condition, metric and logged step, over seeds
    reach: pd.DataFrame  # reach.csv (REACH_COLUMNS): level run and condition rows
    notes: list[str]  # thresholds no run logs


def training_curves(c: Conditions) -> Curves:
    """The curves stage: every usable run's metrics.csv, by condition."""
    notes: list[str] = []
    reach = reach_table(c.usable, c.labels, c.baseline_for, c.settings, notes)
    return Curves(table=curves_table(c.usable, c.labels, c.settings), reach=reach, notes=notes)


def curve_columns(usable: dict) -> list[str]:
    cols = {c for runs in usable.values() for r in runs if r.metrics is not None for c in r.metrics.columns}
    return sorted(cols, key=lambda c: (not c.startswith(VAL), c != VAL_REACH_METRIC, c != DEFAULT_REACH_METRIC,
                                       not c.startswith(TRAIN), c))


def curves_table(usable: dict, labels: dict, s: Settings) -> pd.DataFrame:
    parts = []
    for cond, runs in usable.items():
        frames = [r.metrics for r in runs if r.metrics is not None]
        if not frames:
            continue
        for col in curve_columns({cond: runs}):
            series = [f[col].rename(i) for i, f in enumerate(frames) if col in f.columns]
            wide = pd.concat(series, axis=1)
            values = wide.to_numpy(dtype=np.float64)
            n = np.isfinite(values).sum(axis=1)
            keep = n > 0
            lo, hi = t_interval(values[keep], s.confidence, axis=1)
            with np.errstate(invalid="ignore"):
                mean = np.nanmean(values[keep], axis=1)
            parts.append(pd.DataFrame({
                "condition": labels[cond], "metric": col, "step": wide.index.to_numpy()[keep],
                "mean": mean, "ci_low": np.atleast_1d(lo), "ci_high": np.atleast_1d(hi),
                "n_seeds": n[keep],
            }))
    if not parts:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return pd.concat(parts, ignore_index=True)[CURVE_COLUMNS]


REACH_COLUMNS = ["level", "condition", "run", "seed", "metric", "op", "threshold", "reached", "runs",
                 "step", "step_ci_low", "step_ci_high", "time_s", "source", "caveat"]


def reach_window(metric: str, s: Settings) -> int:
    """Running-mean window for steps to reach. val/ columns are not smoothed: each is an evaluation
    of a fixed validation subset (already a mean over hundreds of samples, far less noisy than one
    batch's training reward), and a window of W evaluations every N steps spans W*N steps, which
    would delay every reached step by about (W-1)*N/2 steps: a bias as large as the effects the
    study looks for. The threshold (the baseline's final value) is then unsmoothed too."""
    return 1 if metric.startswith(VAL) else s.smooth


def _reach_rows(runs, label, metric, op, thr, window, source, caveat, s) -> list[dict]:
    """Per run, the first step (and second) reaching `thr`; per condition the restricted mean: a run
    that never reaches it counts as reaching at its last logged step (censored, not dropped, so the
    slow seeds stay in the mean), with a t-interval over those restricted values."""
    rows, steps, times = [], [], []
    for run in runs:
        found = first_reach(run.metrics, metric, op, thr, window)
        if found is None:
            continue
        steps.append(found.step)
        times.append(found.time_s)
        rows.append({"level": "run", "condition": label, "run": run.rel, "seed": run.seed, "metric": metric,
                     "op": op, "threshold": thr, "reached": found.reached, "runs": 1, "step": found.step,
                     "step_ci_low": np.nan, "step_ci_high": np.nan, "time_s": found.time_s, "source": source,
                     "caveat": caveat})
    if steps:
        lo, hi = t_interval(steps, s.confidence)
        rows.append({"level": "condition", "condition": label, "run": "", "seed": "", "metric": metric, "op": op,
                     "threshold": thr, "reached": int(sum(r["reached"] for r in rows)), "runs": len(steps),
                     "step": float(np.mean(steps)), "step_ci_low": lo, "step_ci_high": hi,
                     "time_s": nanmean(times), "source": source, "caveat": caveat})
    return rows


def reach_table(usable: dict, labels: dict, baseline_for: dict, s: Settings, notes: list[str]) -> pd.DataFrame:
    """Steps (and seconds) to a threshold. Default: held-out val/pass@1 when logged, else the training
    reward, up to the final value of each condition's baseline (its study family's, with a study)."""
    specs: list[tuple[str, str, float, str, list]] = []
    for spec in s.reach:
        target = parse_reach(spec)
        specs.append((target.column, target.op, target.value, f"--reach {spec}", list(usable)))
    if not specs:
        logged = {c for runs in usable.values() for r in runs if r.metrics is not None for c in r.metrics.columns}
        metric = VAL_REACH_METRIC if VAL_REACH_METRIC in logged else DEFAULT_REACH_METRIC
        window = reach_window(metric, s)
        bases = list(dict.fromkeys(b for (_, r), b in baseline_for.items() if r is None and b is not None))
        for b in bases:
            thr = final_mean([r.metrics for r in usable.get(b, [])], metric, window)
            if thr is None:
                continue
            whose = "baseline's" if len(bases) == 1 else f"baseline {labels[b]}'s"
            how = (f"last {s.smooth}-step averages" if window > 1 else "last evaluations")
            members = [c for c in usable if c == b or baseline_for.get((c, None)) == b]
            specs.append((metric, ">=", thr, f"{whose} final {metric} (mean of its seeds' {how})", members))
    rows = []
    for metric, op, thr, source, members in specs:
        caveat = TRAIN_CAVEAT if metric.startswith(TRAIN) else ""
        found = [_reach_rows(usable[cond], labels[cond], metric, op, thr, reach_window(metric, s), source, caveat, s)
                 for cond in members]
        rows += [row for part in found for row in part]
        if not any(found):
            notes.append(f"Steps to reach {metric} {op} {thr:g}: no run logs `{metric}` in metrics.csv.")
    return pd.DataFrame(rows, columns=REACH_COLUMNS)

