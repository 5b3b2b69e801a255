"""Intervals and tests as pure functions of arrays and a seeded `numpy.random.Generator`.

Most statistics here are ratios of sums over prompts, sum(num) / sum(den): a plain mean has den = 1,
a rate over samples (precision = correct / answered) has count denominators. One weighted form
covers every metric, and a bootstrap resample of prompts is then a row of multinomial counts W,
so a whole batch of resamples is two matrix products, (W @ num) / (W @ den).
"""

from __future__ import annotations

import warnings
import zlib
from typing import NamedTuple, Sequence

import numpy as np
import scipy.stats
from statsmodels.stats.proportion import proportion_confint

# Rows of the resample-count matrix are built in chunks so memory stays near this many cells.
_CELLS_PER_CHUNK = 4_000_000


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """A generator per (purpose, condition, regime, ...): results don't depend on processing order."""
    return np.random.default_rng([int(seed), zlib.crc32("\x1f".join(keys).encode())])


def nanmean(values) -> float:
    """Mean of the finite values; NaN when there are none."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else np.nan


class Interval(NamedTuple):
    low: float | np.ndarray
    high: float | np.ndarray


class BootstrapCI(NamedTuple):
    estimate: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray
    method: str | np.ndarray  # "BCa" or "percentile" (per element when vectorised)
    distribution: np.ndarray  # (..., n_resamples)


def wilson_interval(successes, n, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a binomial rate: statsmodels' proportion_confint(method="wilson"), set
    to exactly 0 and 1 at the ends (where the formula leaves ~1e-18 of rounding). Vectorised over
    arrays; n == 0 gives NaN bounds."""
    x = np.asarray(successes, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if np.any(x < 0) or np.any(x > m):
        raise ValueError("need 0 <= successes <= n")
    with np.errstate(divide="ignore", invalid="ignore"):
        low, high = proportion_confint(x, m, alpha=1.0 - confidence, method="wilson")
    low = np.where(m > 0, np.where(x == 0, 0.0, low), np.nan)
    high = np.where(m > 0, np.where(x == m, 1.0, high), np.nan)
    return Interval(float(low), float(high)) if low.ndim == 0 else Interval(low, high)


def t_interval(values, confidence: float = 0.95, axis: int = 0) -> Interval:
    """Student-t interval for a mean (e.g. across seeds); NaN where fewer than 2 values."""
    v = np.asarray(values, dtype=np.float64)
    n = np.sum(np.isfinite(v), axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(v, axis=axis)
        sd = np.nanstd(v, axis=axis, ddof=1)
    nf = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = scipy.stats.t.ppf(0.5 + confidence / 2.0, np.where(nf > 1, nf - 1, np.nan))
        half = q * sd / np.sqrt(nf)
    low = np.where(nf > 1, mean - half, np.nan)
    high = np.where(nf > 1, mean + half, np.nan)
    if np.ndim(low) == 0:
        return Interval(float(low), float(high))
    return Interval(low, high)


def percentile_interval(distribution, confidence: float = 0.95, axis: int = -1) -> Interval:
    a = (1.0 - confidence) / 2.0
    d = np.asarray(distribution, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low = np.nanquantile(d, a, axis=axis)
        high = np.nanquantile(d, 1.0 - a, axis=axis)
    if np.ndim(low) == 0:
        return Interval(float(low), float(high))
    return Interval(low, high)


def _run_scipy_bootstrap(data, statistic, *, confidence, n_resamples, rng, batch, method):
    """scipy.stats.bootstrap, falling back to the percentile interval element-wise where BCa fails.

    BCa is undefined for degenerate data (all values equal: zero jackknife variance) and can
    return NaN or warn; the percentile interval of the same bootstrap distribution is then the
    honest answer, so no second round of resampling is needed.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(divide="ignore", invalid="ignore"):
            res = scipy.stats.bootstrap(data, statistic, n_resamples=n_resamples, batch=batch, vectorized=True, axis=-1,
                                        confidence_level=confidence, method=method, rng=rng)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    low = np.array(res.confidence_interval.low, dtype=np.float64, ndmin=1)
    high = np.array(res.confidence_interval.high, dtype=np.float64, ndmin=1)
    is_bca = method.lower() == "bca"
    methods = np.full(low.shape, "BCa" if is_bca else method, dtype=object)
    if is_bca:
        flat = dist.reshape(-1, dist.shape[-1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            spread = (np.nanmax(flat, axis=-1) - np.nanmin(flat, axis=-1)).reshape(low.shape)
        use = ~np.isfinite(low) | ~np.isfinite(high) | (low > high) | ~(spread > 1e-12)
        if low.size == 1 and any(issubclass(w.category, (scipy.stats.DegenerateDataWarning, RuntimeWarning))
                                 for w in caught):
            use[...] = True
        if use.any():
            pl, ph = percentile_interval(flat, confidence, axis=-1)
            low = np.where(use, np.asarray(pl).reshape(low.shape), low)
            high = np.where(use, np.asarray(ph).reshape(low.shape), high)
            methods = np.where(use, "percentile", methods)
    return low, high, methods, dist


def _as_2d(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def ratio_of_sums(num, den, weights=None):
    """sum(w * num) / sum(w * den) over prompts (axis 0 of num/den); weights: (R, P) -> (R, M)."""
    num = _as_2d(num)
    den = _as_2d(den)
    with np.errstate(divide="ignore", invalid="ignore"):
        if weights is None:
            return num.sum(axis=0) / den.sum(axis=0)
        return (weights @ num) / (weights @ den)


def _counts_from_indices(idx: np.ndarray, n: int) -> np.ndarray:
    """Rows of resampled indices -> rows of multinomial counts (how often each prompt was drawn)."""
    idx = np.asarray(idx)
    flat = idx.reshape(-1, idx.shape[-1]).astype(np.int64, copy=False)
    rows = flat.shape[0]
    offsets = (np.arange(rows, dtype=np.int64) * n)[:, None]
    counts = np.bincount((flat + offsets).ravel(), minlength=rows * n)
    return counts.reshape(rows, n).astype(np.float64)


def _index_statistic(num: np.ndarray, den: np.ndarray):
    """A statistic over resampled prompt *indices*, for scipy.stats.bootstrap.

    Handing scipy an index array (instead of the (M, P) data) keeps its resampling cheap for many
    metrics at once; scipy draws the same indices either way, so intervals equal a direct call.
    """
    n_prompts, n_metrics = num.shape
    # Metrics share few denominators (1, samples, answered, ...), and a resample's counts sum to
    # its size, so den = 1 needs no product at all: one matmul over [num | distinct other dens].
    ones = np.all(den == 1.0, axis=0)
    uniq, inverse = np.unique(den[:, ~ones], axis=1, return_inverse=True)
    stacked = np.ascontiguousarray(np.concatenate([num, uniq], axis=1))
    den_cols = np.empty(n_metrics, dtype=np.int64)
    den_cols[~ones] = n_metrics + np.asarray(inverse).reshape(-1)

    def statistic(idx, axis=-1):
        idx = np.asarray(idx)
        lead = idx.shape[:-1]
        w = _counts_from_indices(idx, n_prompts)
        prod = w @ stacked
        dens = np.empty((prod.shape[0], n_metrics))
        dens[:, ones] = idx.shape[-1]
        dens[:, ~ones] = prod[:, den_cols[~ones]]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = prod[:, :n_metrics] / dens
        return np.moveaxis(out.reshape(*lead, n_metrics), -1, 0)

    return statistic


def _batch_for(n_prompts: int) -> int:
    return max(1, _CELLS_PER_CHUNK // max(1, n_prompts))


def ratio_bootstrap_ci(num, den=None, *, confidence: float = 0.95, n_resamples: int = 10_000,
                       rng: np.random.Generator, method: str = "BCa") -> BootstrapCI:
    """Bootstrap over prompts (rows) of sum(num)/sum(den), for every metric column at once.

    `num`, `den`: (P,) or (P, M). Returns arrays of length M (scalars for 1-D input) and the
    bootstrap distribution (M, n_resamples).
    """
    one_d = np.ndim(num) == 1
    num2 = _as_2d(num)
    den2 = np.ones_like(num2) if den is None else _as_2d(den)
    if num2.shape != den2.shape:
        raise ValueError("num and den must have the same shape")
    n_prompts, n_metrics = num2.shape
    est = ratio_of_sums(num2, den2)
    if n_prompts < 2:
        nan = np.full(n_metrics, np.nan)
        methods = np.full(n_metrics, "n/a", dtype=object)
        res = BootstrapCI(est, nan, nan, methods, np.zeros((n_metrics, 0)))
    else:
        low, high, methods, dist = _run_scipy_bootstrap(
            (np.arange(n_prompts),), _index_statistic(num2, den2), confidence=confidence,
            n_resamples=n_resamples, rng=rng, batch=_batch_for(n_prompts), method=method)
        res = BootstrapCI(est, low, high, methods, dist.reshape(n_metrics, -1))
    if one_d:
        return BootstrapCI(float(res.estimate[0]), float(res.low[0]), float(res.high[0]),
                           str(res.method[0]), res.distribution[0])
    return res


def prompt_replicates(num, den=None, *, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, M) bootstrap replicates of sum(num)/sum(den) over resampled prompts."""
    num2 = _as_2d(num)
    den2 = np.ones_like(num2) if den is None else _as_2d(den)
    n_prompts = num2.shape[0]
    out = np.empty((n_resamples, num2.shape[1]))
    step = _batch_for(n_prompts)
    for start in range(0, n_resamples, step):
        stop = min(n_resamples, start + step)
        idx = rng.integers(0, n_prompts, size=(stop - start, n_prompts), dtype=np.int32)
        out[start:stop] = ratio_of_sums(num2, den2, _counts_from_indices(idx, n_prompts))
    return out


def hierarchical_bootstrap_distribution(nums: Sequence, dens: Sequence | None = None, *, n_resamples: int = 10_000,
                                        rng: np.random.Generator,
                                        replicates: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Two-level bootstrap: resample seeds with replacement, then prompts within each drawn seed.

    The statistic is the mean over drawn seeds of each seed's sum(num)/sum(den) (the mean across
    seeds of a per-run metric). `nums[s]`: (P_s,) or (P_s, M) per seed. Returns (n_resamples, M).

    A seed drawn twice in one replicate must get two independent prompt resamples. Each seed
    gets a pool of n_resamples iid prompt replicates (`replicates`, e.g. the distribution a
    per-run bootstrap already computed, or drawn here) and slot j of replicate b reads pool row
    (b*S + j) mod n_resamples: rows differ within a replicate, so every replicate has exactly the
    two-level distribution, at the cost of one prompt bootstrap per seed.
    """
    n_seeds = len(nums)
    if n_seeds == 0:
        raise ValueError("need at least one seed")
    if dens is None:
        dens = [None] * n_seeds
    if replicates is None:
        replicates = [prompt_replicates(nm, dn, n_resamples=n_resamples, rng=rng)
                      for nm, dn in zip(nums, dens)]
    pools = []
    for r in replicates:
        r = np.asarray(r, dtype=np.float64)
        r = r[:, None] if r.ndim == 1 else r
        if r.shape[0] != n_resamples:
            raise ValueError(f"replicates must be (n_resamples, M); got {r.shape}")
        pools.append(r)
    pools = np.stack(pools)
    choice = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))
    b = np.arange(n_resamples)[:, None]
    j = np.arange(n_seeds)[None, :]
    if n_seeds <= n_resamples:
        rows = (b * n_seeds + j) % n_resamples
    else:  # more seeds than resamples: rows can't all differ; draw them instead
        rows = rng.integers(0, n_resamples, size=(n_resamples, n_seeds))
    vals = pools[choice, rows]  # (B, S, M)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(vals, axis=1)


def iqm(scores) -> float:
    """rliable's interquartile mean (`metrics.aggregate_iqm`): the 25% trimmed mean over every run and
    task, scipy.stats.trim_mean(scores, 0.25, axis=None). `scores`: (runs,) or (runs, tasks). It cuts
    int(0.25 * n) values from each end, so it equals the plain mean below 4 values (3 seeds) and is
    the mean of the middle 3 of 5."""
    a = np.asarray(scores, dtype=np.float64)
    return float(scipy.stats.trim_mean(a, proportiontocut=0.25, axis=None))


def _stratified_resamples(scores: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, runs, tasks): each task's runs resampled with replacement, independently per task
    and cell, as rliable's `StratifiedBootstrap` (runs are resampled within each task, tasks are kept)."""
    n_runs, n_tasks = scores.shape
    idx = rng.integers(0, n_runs, size=(n_resamples, n_runs, n_tasks))
    return scores[idx, np.arange(n_tasks)[None, None, :]]


def iqm_ci(scores, *, confidence: float = 0.95, n_resamples: int = 10_000,
           rng: np.random.Generator) -> BootstrapCI:
    """IQM with rliable's interval: the percentile interval of a stratified bootstrap over runs
    (`library.get_interval_estimates(..., method='percentile')`). `scores`: (runs,) or (runs, tasks)."""
    a = np.asarray(scores, dtype=np.float64)
    a = a[:, None] if a.ndim == 1 else a
    est = iqm(a)
    if a.shape[0] < 2:
        return BootstrapCI(est, np.nan, np.nan, "n/a", np.zeros(0))
    res = _stratified_resamples(a, n_resamples, rng).reshape(n_resamples, -1)
    dist = scipy.stats.trim_mean(res, proportiontocut=0.25, axis=1)
    low, high = percentile_interval(dist, confidence)
    return BootstrapCI(est, float(low), float(high), "stratified bootstrap percentile", dist)


def performance_profile(scores, taus, *, confidence: float = 0.95, n_resamples: int = 2_000,
                        rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rliable's score distribution (`library.create_performance_profile` with run scores): the fraction
    of runs (x tasks) whose score is above tau, for each tau, with a stratified-bootstrap percentile band.
    Returns (profile, low, high), each of len(taus); the band is NaN without `rng` or with one run."""
    a = np.asarray(scores, dtype=np.float64)
    a = a[:, None] if a.ndim == 1 else a
    t = np.asarray(taus, dtype=np.float64)
    profile = (a.reshape(-1)[None, :] > t[:, None]).mean(axis=1)
    nan = np.full(t.shape, np.nan)
    if rng is None or a.shape[0] < 2:
        return profile, nan, nan
    res = _stratified_resamples(a, n_resamples, rng).reshape(n_resamples, -1)
    dist = (res[:, None, :] > t[None, :, None]).mean(axis=2)  # (B, taus)
    low, high = percentile_interval(dist.T, confidence, axis=-1)
    return profile, np.asarray(low), np.asarray(high)
