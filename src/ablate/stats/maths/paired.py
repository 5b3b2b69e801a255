"""Comparisons of two conditions, pure: on the same prompts (`paired_test`: a permutation test that swaps
the conditions within prompts, and a paired bootstrap interval) and across seeds (`seed_test`, Welch's t;
`probability_of_improvement`, rliable's). Functions of arrays and a seeded `numpy.random.Generator`, on the
weighted ratio-of-sums form of ablate.stats.maths.intervals."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import scipy.stats

from ablate.stats.maths.intervals import _batch_for, _counts_from_indices, _run_scipy_bootstrap, percentile_interval


class PairedResult(NamedTuple):
    diff: float
    low: float
    high: float
    p_value: float
    n: int
    method: str


class ProbabilityOfImprovement(NamedTuple):
    estimate: float
    low: float
    high: float


class SeedTest(NamedTuple):
    statistic: float
    p_value: float
    note: str


def _permutation_p(null: np.ndarray, observed: float, exact: bool) -> float:
    """Two-sided p-value as scipy.stats.permutation_test computes it (ties within float noise)."""
    eps = 1e-14
    gamma = abs(eps * observed)
    adj = 0 if exact else 1
    n = null.size
    greater = (np.count_nonzero(null >= observed - gamma) + adj) / (n + adj)
    less = (np.count_nonzero(null <= observed + gamma) + adj) / (n + adj)
    return float(min(1.0, 2.0 * min(greater, less)))


def paired_test(x, y, x_den=None, y_den=None, *, confidence: float = 0.95, n_resamples: int = 10_000,
                rng: np.random.Generator) -> PairedResult:
    """Paired comparison of two conditions on the same prompts (row i of x and y = one prompt).

    Statistic: sum(x)/sum(x_den) - sum(y)/sum(y_den) (a mean difference when dens are None).
    p-value: permutation test that swaps the two conditions' values within each prompt (a sign
    flip of the per-prompt difference for means); exact when 2**P <= n_resamples.
    CI: paired bootstrap of prompts (BCa, percentile fallback).
    """
    xn = np.asarray(x, dtype=np.float64).ravel()
    yn = np.asarray(y, dtype=np.float64).ravel()
    xd = np.ones_like(xn) if x_den is None else np.asarray(x_den, dtype=np.float64).ravel()
    yd = np.ones_like(yn) if y_den is None else np.asarray(y_den, dtype=np.float64).ravel()
    if not (xn.shape == yn.shape == xd.shape == yd.shape):
        raise ValueError("paired arrays must have the same length")
    n = xn.size
    if n == 0:
        return PairedResult(np.nan, np.nan, np.nan, np.nan, 0, "n/a")
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = float(xn.sum() / xd.sum() - yn.sum() / yd.sum())

    null, exact = _swap_null(xn, yn, xd, yd, n_resamples, rng)
    p = _permutation_p(null[np.isfinite(null)], observed, exact) if np.isfinite(observed) else np.nan
    low, high, method = _paired_interval(xn, yn, xd, yd, confidence, n_resamples, rng)
    return PairedResult(observed, low, high, p, n, method)


def _swap_null(xn, yn, xd, yd, n_resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """paired_test's permutation null: the statistic with each prompt's values swapped between the
    conditions or not, every pattern when 2**P <= n_resamples (exact), else n_resamples random ones."""
    n = xn.size
    deltas = np.stack([yn - xn, yd - xd], axis=1)
    sx_n, sx_d, sy_n, sy_d = xn.sum(), xd.sum(), yn.sum(), yd.sum()

    def swapped(flips: np.ndarray) -> np.ndarray:
        # flips[r, i] = 1 swaps prompt i's values between the conditions
        moved = flips @ deltas
        dn, dd = moved[:, 0], moved[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return (sx_n + dn) / (sx_d + dd) - (sy_n - dn) / (sy_d - dd)

    exact = n <= 20 and 2 ** n <= n_resamples
    if exact:
        codes = np.arange(2 ** n, dtype=np.int64)[:, None]
        return swapped(((codes >> np.arange(n)[None, :]) & 1).astype(np.float64)), True
    parts = []
    step = _batch_for(n)
    for start in range(0, n_resamples, step):
        rows = min(step, n_resamples - start)
        flips = rng.integers(0, 2, size=(rows, n), dtype=np.int8).astype(np.float64)
        parts.append(swapped(flips))
    return np.concatenate(parts), False


def _paired_interval(xn, yn, xd, yd, confidence: float, n_resamples: int,
                     rng: np.random.Generator) -> tuple[float, float, str]:
    """paired_test's interval: a paired bootstrap of prompts (BCa, percentile fallback); NaN below 2 prompts."""
    n = xn.size
    if n < 2:
        return np.nan, np.nan, "n/a"
    num = np.stack([xn, yn], axis=1)
    den = np.stack([xd, yd], axis=1)

    def diff_statistic(idx, axis=-1):
        w = _counts_from_indices(np.asarray(idx), n)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (w @ num) / (w @ den)
        return (r[:, 0] - r[:, 1]).reshape(np.shape(idx)[:-1])

    low, high, methods, _ = _run_scipy_bootstrap((np.arange(n),), diff_statistic, confidence=confidence,
                                                 n_resamples=n_resamples, rng=rng, batch=_batch_for(n), method="BCa")
    return float(low[0]), float(high[0]), str(methods[0])


def seed_test(x, y) -> SeedTest:
    """Welch's t-test across seeds (scipy.stats.ttest_ind, equal_var=False)."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    a = a[np.isfinite(a)]
    b = b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return SeedTest(np.nan, np.nan, f"needs >= 2 seeds per condition (have {a.size} and {b.size})")
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        if a[0] == b[0]:
            return SeedTest(0.0, 1.0, "all seeds identical")
        return SeedTest(np.nan, np.nan, "zero variance across seeds in both conditions")
    with warnings.catch_warnings():
        # one arm constant (e.g. a rate that is 0 in every seed): scipy warns of precision loss, yet its
        # variance is exactly 0 and Welch's statistic stands on the other arm's: no noise on the console
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        res = scipy.stats.ttest_ind(a, b, equal_var=False)
    return SeedTest(float(res.statistic), float(res.pvalue), "")


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + 0.5 P(X = Y) over all pairs, along the last axis of x (n) and y (m)."""
    gt = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return gt + 0.5 * eq


def probability_of_improvement(x, y, *, confidence: float = 0.95, n_resamples: int = 10_000,
                               rng: np.random.Generator) -> ProbabilityOfImprovement:
    """rliable's probability of improvement of X over Y from seed-level scores.

    P(X > Y) + 0.5 P(X = Y) = Mann-Whitney U / (n m); CI: percentile of a bootstrap that
    resamples the seeds of each condition independently.
    """
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    a = a[np.isfinite(a)]
    b = b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return ProbabilityOfImprovement(np.nan, np.nan, np.nan)
    est = float(_poi(a, b))
    ia = rng.integers(0, a.size, size=(n_resamples, a.size))
    ib = rng.integers(0, b.size, size=(n_resamples, b.size))
    dist = _poi(a[ia], b[ib])
    low, high = percentile_interval(dist, confidence)
    return ProbabilityOfImprovement(est, float(low), float(high))
