"""rliable's robust summaries over runs (Agarwal et al. 2021, "Deep RL at the edge of the statistical
precipice"): the interquartile mean of each compared metric, and its performance profile (the fraction
of a condition's runs above tau, over tau). Each with its own stratified-bootstrap generators, keyed by
condition, regime and metric: no other number of the report moves when they are added or dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ablate.stats.maths.intervals import iqm_ci, performance_profile, rng_for
from ablate.stats.read.runs import condition_label

if TYPE_CHECKING:
    from ablate.stats.stages.settings import Settings

PROFILE_TAUS = 201  # points of each profile's tau grid
PROFILE_RESAMPLES = 2_000  # at most: the band is drawn, not decided on
PROFILE_COLUMNS = ["regime", "metric", "condition", "n_runs", "tau", "fraction", "low", "high"]

ROBUST_COLUMNS = ["regime", "metric", "condition", "n_runs", "mean", "iqm", "iqm_ci_low", "iqm_ci_high",
                  "trimmed_per_side", "ci_method"]


def robust_table(groups: dict, labels: dict, regimes: Sequence[str], s: Settings) -> pd.DataFrame:
    """rliable's interquartile mean over runs of each compared metric, per condition and regime, with
    its stratified-bootstrap interval. Its own generators: no other number of the report moves."""
    rows = []
    for regime in regimes:
        for metric in s.metrics:
            for (cond, r), g in groups.items():
                if r != regime:
                    continue
                values = g.values(metric)
                if values is None or not values.size:
                    continue
                ci = iqm_ci(values, confidence=s.confidence, n_resamples=s.resamples,
                            rng=rng_for(s.seed, "iqm", condition_label(cond), regime, metric))
                rows.append({"regime": regime, "metric": metric, "condition": labels[cond], "n_runs": int(values.size),
                             "mean": float(values.mean()), "iqm": ci.estimate, "iqm_ci_low": ci.low,
                             "iqm_ci_high": ci.high, "trimmed_per_side": int(0.25 * values.size),
                             "ci_method": ci.method})
    order = {label: i for i, label in enumerate(labels[c] for c in labels)}
    df = pd.DataFrame(rows, columns=ROBUST_COLUMNS)
    if len(df):
        df = df.sort_values(["regime", "metric", "condition"], key=lambda col: col.map(order) if col.name == "condition"
                            else col.map(lambda m: s.metrics.index(m)) if col.name == "metric" else col,
                            kind="stable").reset_index(drop=True)
    return df


def profile_table(summary: pd.DataFrame, labels: dict, keys: dict, regimes: Sequence[str], s: Settings) -> pd.DataFrame:
    """Each compared metric's performance profile per regime and condition (summary.csv's run rows), on
    one tau grid per (regime, metric) spanning every condition's runs, with a stratified-bootstrap band
    (NaN with fewer than 2 runs)."""
    order = [labels[c] for c in labels]
    key_of = {labels[c]: keys.get(c, labels[c]) for c in labels}
    parts = []
    for regime in regimes:
        runs = summary[(summary["level"] == "run") & (summary["regime"] == regime)]
        for metric in [m for m in s.metrics if (runs["metric"] == m).any()]:
            sub = runs[runs["metric"] == metric]
            values = sub["value"].to_numpy(float)
            lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
            pad = 0.05 * (hi - lo) if hi > lo else 0.01
            taus = np.linspace(lo - pad, hi + pad, PROFILE_TAUS)
            for label in [c for c in order if c in set(sub["condition"])]:
                v = sub[sub["condition"] == label]["value"].to_numpy(float)
                v = v[np.isfinite(v)]
                fraction, low, high = performance_profile(
                    v, taus, confidence=s.confidence, n_resamples=min(s.resamples, PROFILE_RESAMPLES),
                    rng=rng_for(s.seed, "profile", key_of[label], regime, metric))
                parts.append(pd.DataFrame({"regime": regime, "metric": metric, "condition": label, "n_runs": v.size,
                                           "tau": taus, "fraction": fraction, "low": low, "high": high}))
    return pd.concat(parts, ignore_index=True)[PROFILE_COLUMNS] if parts else pd.DataFrame(columns=PROFILE_COLUMNS)
