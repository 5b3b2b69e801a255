"""Recipe-level intervals and the verdict rules, as pure functions of per-seed values.

The unit of replication is the training seed: a claim compares per-seed values (each run's metric on
the shared test prompts, so prompts are already paired). The interval that decides is Welch's
t-interval for the difference of the two arms' means (scipy's ttest_ind(equal_var=False)), or the
one-sample t-interval for a claim about one condition; its level is the claim's nominal level at the
current look (Bonferroni over the study's claims, then the seed plan's spending). The test and the
interval are one object, so a verdict can never disagree with the p-value beside it.

Verdicts are a partition: not testable (a precondition failed, or a required claim did not
replicate), else the claim type's rule (ablate.stats.claims.claim_types: superiority, non_inferiority,
keeps_gain, equivalence, bounded, descriptive), which also says what the interval excluded; the rules
are tabled in docs/stats.md. Equivalence and non-inferiority read the same (1 - alpha) interval, i.e.
one-sided tests at alpha/2 each (TOST at alpha/2: the usual regulatory reading of a 95% interval).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import scipy.stats

from ablate.stats.maths.rates import meets

VERDICTS = ("replicated", "not replicated", "inconclusive", "not testable")


class Estimate(NamedTuple):
    diff: float
    low: float
    high: float
    p_value: float
    df: float
    note: str = ""


def _finite(values) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).ravel()
    return a[np.isfinite(a)]


def welch(x: Sequence[float], y: Sequence[float] | None, confidence: float, null: float = 0.0) -> Estimate:
    """mean(x) - mean(y) with Welch's t-interval and two-sided p-value (y None: mean(x) - null,
    one-sample t). Fewer than 2 seeds in an arm: no interval. No seed variance at all: the interval
    is the point (the data leave no doubt, and no test is possible), said in `note`."""
    a = _finite(x)
    b = None if y is None else _finite(y)
    if a.size < 2 or (b is not None and b.size < 2):
        have = f"{a.size}" if b is None else f"{a.size} and {b.size}"
        diff = (a.mean() if a.size else math.nan) - (null if b is None else (b.mean() if b.size else math.nan))
        return Estimate(float(diff), math.nan, math.nan, math.nan, math.nan, f"needs >= 2 seeds per arm (have {have})")
    diff = float(a.mean() - (null if b is None else b.mean()))
    spread = np.ptp(a) + (0.0 if b is None else np.ptp(b))
    if spread == 0:
        return Estimate(diff, diff, diff, 1.0 if diff == 0 else 0.0, math.nan, "no seed-to-seed variation")
    res = (scipy.stats.ttest_1samp(a, null) if b is None else scipy.stats.ttest_ind(a, b, equal_var=False))
    ci = res.confidence_interval(confidence_level=confidence)
    shift = null if b is None else 0.0  # ttest_1samp's interval is for the mean itself
    return Estimate(diff, float(ci.low) - shift, float(ci.high) - shift, float(res.pvalue), float(res.df))


def rate(values: Sequence[float], op: str, threshold: float, confidence: float) -> tuple[int, int, float, float]:
    """Seeds meeting `op threshold` (a bimodal outcome: recover / collapse) with the Clopper-Pearson
    exact interval of their rate: (k, n, low, high)."""
    a = _finite(values)
    k = int(meets(a, op, threshold).sum())
    if a.size == 0:
        return 0, 0, math.nan, math.nan
    ci = scipy.stats.binomtest(k, int(a.size)).proportion_ci(confidence_level=confidence, method="exact")
    return k, int(a.size), float(ci.low), float(ci.high)


def compare(op: str, value: float, threshold: float) -> bool:
    return {">=": value >= threshold, "<=": value <= threshold, ">": value > threshold,
            "<": value < threshold}[op]
