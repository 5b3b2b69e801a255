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


def welch_vs_measured(x: Sequence[float], bar: float, bar_se: float, confidence: float) -> Estimate:
    """mean(x) - bar, where the bar is itself an estimate with standard error `bar_se` (one evaluation of a
    starting model: its sampling error), not an exact constant. x: (n,) per-seed values. The interval is
    Welch's with the bar as an arm of known variance (Welch-Satterthwaite df, the bar's df infinite):
    diff +- t_df * sqrt(s^2/n + bar_se^2). bar_se 0 is the one-sample t of `welch`."""
    a = _finite(x)
    if bar_se <= 0 or a.size < 2:
        return welch(x, None, confidence, bar)
    diff = float(a.mean() - bar)
    v = float(a.var(ddof=1)) / a.size
    se = math.sqrt(v + bar_se ** 2)
    df = (v + bar_se ** 2) ** 2 / (v ** 2 / (a.size - 1)) if v > 0 else math.inf
    t = scipy.stats.t(df) if math.isfinite(df) else scipy.stats.norm()
    half = float(t.ppf(0.5 + confidence / 2.0)) * se
    return Estimate(diff, diff - half, diff + half, float(2.0 * t.sf(abs(diff) / se)), df,
                    f"against a measured bar {bar:g} (SE {bar_se:.2g}), its error in the interval")


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial rate, k events in n trials: scipy's binomtest."""
    ci = scipy.stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def no_events(values: Sequence[float], trials: Sequence[float] | None) -> tuple[int, int] | None:
    """(k, N) when every seed of an arm of a rate metric has no events (every value 0: k = 0) or no
    non-events (every value 1: k = N), else None. N = seeds x the fewest trials a seed has: the product of
    (1 - p_i) over every trial is at most (1 - mean p)^N (AM-GM), so the exact bound for k of N holds
    for the mean of the seeds' rates however they (and the prompts within a seed) differ."""
    a, t = _finite(values), None if trials is None else np.asarray(trials, dtype=np.float64).ravel()
    if a.size == 0 or t is None or t.size != a.size or not (np.all(np.isfinite(t)) and t.min() >= 1):
        return None
    n = int(a.size * t.min())
    return (0, n) if np.all(a == 0) else (n, n) if np.all(a == 1) else None


def _mean_interval(a: np.ndarray, trials, confidence: float) -> tuple[float, float, str]:
    """One arm's mean and its interval: exact where it has no events, else the one-sample t (the point
    without seed spread)."""
    counts = no_events(a, trials)
    if counts is not None:
        return (*clopper_pearson(*counts, confidence), f"{counts[0]:,} of {counts[1]:,} trials")
    if np.ptp(a) == 0:
        return float(a[0]), float(a[0]), ""
    ci = scipy.stats.ttest_1samp(a, a.mean()).confidence_interval(confidence_level=confidence)
    return float(ci.low), float(ci.high), ""


def rate_or_welch(x: Sequence[float], y: Sequence[float] | None, confidence: float, null: float = 0.0,
                  trials: tuple | None = None) -> Estimate:
    """`welch`, unless an arm is a rate metric with no events (or no non-events) on any seed (`trials`:
    each arm's per-seed trial counts, `no_events`). Then no seed varies and a t-interval is the point,
    claiming a certainty the counts do not give: that arm's interval is the exact Clopper-Pearson one of
    its pooled counts. One-sample: that interval, less `null` (p: the exact binomial test of `null`). Two
    arms: each arm's interval at 1 - (1 - confidence) / 2 (exact, or the other arm's t), their difference's
    the widest pair (Bonferroni: it covers with at least `confidence`); p: Fisher's exact test on the
    pooled counts when both arms have no events, else none."""
    a, b = _finite(x), None if y is None else _finite(y)
    tx, ty = trials if trials is not None else (None, None)
    cx, cy = no_events(a, tx), None if b is None else no_events(b, ty)
    if (cx is None and cy is None) or a.size < 2 or (b is not None and b.size < 2):
        return welch(x, y, confidence, null)
    if b is None:
        lo, hi, note = _mean_interval(a, tx, confidence)
        k, n = cx
        p = scipy.stats.binomtest(k, n, null).pvalue if 0 < null < 1 else float(k / n == null)
        return Estimate(float(a.mean() - null), lo - null, hi - null, float(p), math.nan,
                        f"{note} on every seed: exact (Clopper-Pearson) interval")
    each = 1.0 - (1.0 - confidence) / 2.0
    (lx, hx, nx), (ly, hy, ny) = _mean_interval(a, tx, each), _mean_interval(b, ty, each)
    p = (scipy.stats.fisher_exact([[cx[0], cy[0]], [cx[1] - cx[0], cy[1] - cy[0]]]).pvalue
         if cx is not None and cy is not None else math.nan)
    note = " vs ".join(n or "the t-interval of its seeds" for n in (nx, ny))
    return Estimate(float(a.mean() - b.mean()), lx - hy, hx - ly, float(p), math.nan,
                    f"{note}: exact (Clopper-Pearson) interval of an arm whose seeds all agree, Bonferroni over the arms")


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


GATE_CONFIDENCE = 0.95  # a precondition's interval: the report's default confidence


class Gate(NamedTuple):
    status: str  # held / failed / undetermined
    value: float  # the mean over the condition's seeds
    low: float
    high: float


def gate(values: Sequence[float], op: str, threshold: float, confidence: float = GATE_CONFIDENCE,
         band: tuple[float, float] | None = None) -> Gate:
    """A precondition (the mean of a condition's per-seed values `op threshold`) decided on an interval,
    not on the point: held when the whole interval clears the threshold, failed when none of it does,
    undetermined when it holds the threshold. The interval is the t-interval of the mean over seeds
    (scipy's ttest_1samp) at `confidence`; no seed spread: the point (the data leave no doubt); one value:
    `band` (a condition mean's own interval, e.g. curves.csv.gz's t band), else none (undetermined)."""
    a = _finite(values)
    if a.size == 0:
        return Gate("undetermined", math.nan, math.nan, math.nan)
    mean = float(a.mean())
    if a.size >= 2 and np.ptp(a) > 0:
        ci = scipy.stats.ttest_1samp(a, mean).confidence_interval(confidence_level=confidence)
        low, high = float(ci.low), float(ci.high)
    elif a.size >= 2:
        low = high = mean
    elif band is not None and all(math.isfinite(b) for b in band):
        low, high = float(band[0]), float(band[1])
    else:
        return Gate("undetermined", mean, math.nan, math.nan)
    if compare(op, low, threshold) and compare(op, high, threshold):
        return Gate("held", mean, low, high)
    if not compare(op, low, threshold) and not compare(op, high, threshold):
        return Gate("failed", mean, low, high)
    return Gate("undetermined", mean, low, high)
