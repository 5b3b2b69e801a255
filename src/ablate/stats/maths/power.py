"""Power planning for the seed-level comparison: how small a difference the current seeds can detect,
and how many seeds a given difference needs.

The variance is the seed-to-seed variance of per-run values, the same numbers the seed-level test
uses. Every seed is evaluated on the same prompts with its own samples, so that variance already
holds the prompt-level sampling noise; nothing is added on top. Both sides are assumed to share one
SD (the pooled one).

The test planned for is the one the report runs: Welch's t-test. statsmodels' TTestIndPower models
Student's pooled t-test, and at a handful of seeds Welch's estimated degrees of freedom cost a lot
of power: at TTestIndPower's 80%-power difference, Welch detects 48% at 2 seeds per side, 70% at 3,
78% at 5 (simulated). So up to SIMULATE_UP_TO seeds the planner simulates Welch's test on standard
normal seed values (seeded, so a report is reproducible); beyond that the two tests agree and
TTestIndPower (noncentral t) answers. The normal approximation is not used: at 3 seeds it would
claim 2.3 SD where Welch needs about 3.7.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.optimize
import scipy.stats
from statsmodels.stats.power import TTestIndPower

POWER = 0.8
MAX_SEEDS = 10_000  # beyond this a plan is not a plan; reported as "more than MAX_SEEDS"
SIMULATE_UP_TO = 50
DRAWS = 20_000  # simulated sweeps per seed count: the quantile below is then good to ~1%


def pooled_sd(x, y) -> float:
    """Pooled standard deviation of two samples of per-seed values (NaN without 1 degree of freedom)."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    dof = a.size + b.size - 2
    if dof < 1:
        return math.nan
    ss = (((a - a.mean()) ** 2).sum() if a.size else 0.0) + (((b - b.mean()) ** 2).sum() if b.size else 0.0)
    return float(math.sqrt(ss / dof))


@functools.lru_cache(maxsize=4096)
def standard_mdd(n1: int, n2: int, alpha: float, power: float = POWER) -> float:
    """The true difference, in SDs, that a two-sided test at level alpha detects (rejects in the
    right direction) with probability `power`, with n1 and n2 seeds."""
    if min(n1, n2) > SIMULATE_UP_TO:
        solver = TTestIndPower()

        def short(es: float) -> float:
            # upper tail at alpha/2 = statsmodels' 'larger': a wrong-direction rejection is no detection
            p = float(solver.power(effect_size=es, nobs1=n1, alpha=alpha / 2, ratio=n2 / n1, alternative="larger"))
            # the noncentral t's tail underflows to NaN where the power is 1 to machine precision
            return (p if math.isfinite(p) else 1.0) - power

        # beyond 50 seeds a side the answer is under 1.2 SD at any alpha above 1e-6, so 3 brackets it
        return float(scipy.optimize.brentq(short, 0.0, 3.0, xtol=1e-8))
    rng = np.random.default_rng([n1, n2])
    z1 = rng.standard_normal((DRAWS, n1))
    z2 = rng.standard_normal((DRAWS, n2))
    v1, v2 = z1.var(axis=1, ddof=1) / n1, z2.var(axis=1, ddof=1) / n2
    se = np.sqrt(v1 + v2)
    dof = (v1 + v2) ** 2 / (v1 ** 2 / (n1 - 1) + v2 ** 2 / (n2 - 1))
    # Welch's t for a true difference d is (zbar1 - zbar2 + d) / se: draw b rejects upwards for every
    # d above its own threshold, so the power at d is the share of thresholds below d
    threshold = scipy.stats.t.isf(alpha / 2, dof) * se - (z1.mean(axis=1) - z2.mean(axis=1))
    return float(np.quantile(threshold, power))


def mdd(sd: float, n1: int, n2: int, alpha: float, power: float = POWER) -> float:
    """Minimum detectable difference (in the metric's units) with n1 and n2 seeds."""
    if not (np.isfinite(sd) and sd > 0) or n1 < 2 or n2 < 2:
        return math.nan
    return sd * standard_mdd(int(n1), int(n2), float(alpha), power)


def seeds_needed(sd: float, effect: float, alpha: float, power: float = POWER) -> float:
    """Fewest seeds per condition (equal on both sides) that detect `effect` with `power`; inf beyond
    MAX_SEEDS."""
    if not (np.isfinite(sd) and sd > 0 and np.isfinite(effect) and effect > 0):
        return math.nan
    es = effect / sd

    def enough(n: int) -> bool:
        return standard_mdd(n, n, float(alpha), power) <= es

    lo, hi = 1, 2  # not enough(lo), enough(hi): doubling, then bisection
    while not enough(hi):
        if hi >= MAX_SEEDS:
            return math.inf
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return float(hi)


def power_line(n1: int, n2: int, sd: float, mdd_value: float, needed: float, effect: float, fmt) -> str:
    """The line under a comparison that is not significant across seeds."""
    if not (np.isfinite(sd) and sd > 0):
        why = "no seed-to-seed variation in either condition" if sd == 0 else "no seed variance to plan from"
        return f"inconclusive: {why}; power cannot be planned"
    if min(n1, n2) < 2:
        head = f"inconclusive: the seed-level test needs >= 2 seeds per condition (have {n1} and {n2})"
    else:
        seeds = f"{n1} seeds" if n1 == n2 else f"{n1} vs {n2} seeds"
        head = f"inconclusive: {seeds} detect >= {fmt(mdd_value)}"
    if math.isinf(needed):
        return f"{head}; more than {MAX_SEEDS} seeds would be needed to detect {fmt(effect)}"
    return f"{head}; {int(needed)} seeds would detect {fmt(effect)}"
