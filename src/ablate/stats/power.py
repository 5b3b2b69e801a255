"""Power planning for the seed-level comparison: how small a difference the current seeds can detect,
and how many seeds a given difference needs.

The variance is the seed-to-seed variance of per-run values, the same numbers the seed-level Welch
test uses. Every seed is evaluated on the same prompts with its own samples, so that variance already
holds the prompt-level sampling noise; nothing is added on top. The power model is the two-sample
t-test (statsmodels' TTestIndPower, noncentral t) with a pooled SD, not the normal approximation: with
2-10 seeds the t's heavy tails are the whole story (at 3 seeds per side the normal approximation
gives 2.29 SD where the t-test needs 3.07, at alpha 0.05). Welch's test with equal seed counts and
similar variances has nearly the same power; the simulation test checks the plan against Welch.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize

POWER = 0.8
MAX_SEEDS = 10_000  # beyond this a plan is not a plan; reported as "> MAX_SEEDS"


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


def _power(effect_size: float, n1: float, n2: float, alpha: float) -> float:
    """Power of the two-sided test at level alpha to reject in the direction of the effect.

    Rejections in the wrong direction are not detections, so this is the upper tail at alpha/2
    (what statsmodels' 'larger' alternative computes); the two-sided figure differs by under alpha/2
    and its lower tail comes back NaN from scipy's noncentral t for large effects at few seeds.
    """
    from statsmodels.stats.power import TTestIndPower

    return float(TTestIndPower().power(effect_size=effect_size, nobs1=n1, alpha=alpha / 2, ratio=n2 / n1,
                                       alternative="larger"))


# statsmodels' solve_power returns NaN (a ConvergenceWarning) for some inputs that have an answer,
# so both solves below find the root themselves on its power function, which is monotone in both.


def mdd(sd: float, n1: int, n2: int, alpha: float, power: float = POWER) -> float:
    """Minimum detectable difference (two-sided t-test at level alpha) with n1 and n2 seeds."""
    if not (np.isfinite(sd) and sd > 0) or n1 < 2 or n2 < 2:
        return math.nan
    hi = 1.0
    while _power(hi, n1, n2, alpha) < power:
        hi *= 2.0
    d = scipy.optimize.brentq(lambda es: _power(es, n1, n2, alpha) - power, 0.0, hi, xtol=1e-10)
    return float(d) * sd


def seeds_needed(sd: float, effect: float, alpha: float, power: float = POWER) -> float:
    """Fewest seeds per condition (equal on both sides) for the t-test to detect `effect` with `power`;
    inf beyond MAX_SEEDS."""
    if not (np.isfinite(sd) and sd > 0 and np.isfinite(effect) and effect > 0):
        return math.nan
    es = effect / sd
    lo, hi = 1, 2  # power(lo) < power <= power(hi), by doubling then bisection
    while _power(es, hi, hi, alpha) < power:
        if hi >= MAX_SEEDS:
            return math.inf
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _power(es, mid, mid, alpha) >= power else (mid, hi)
    return float(hi)


def seeds_text(n1: int, n2: int) -> str:
    return f"{n1} seeds" if n1 == n2 else f"{n1} vs {n2} seeds"


def power_line(n1: int, n2: int, sd: float, mdd_value: float, needed: float, effect: float,
               fmt) -> str:
    """The line under a comparison that is not significant across seeds."""
    if n1 < 2 or n2 < 2:
        head = f"inconclusive: the seed-level test needs >= 2 seeds per condition (have {n1} and {n2})"
    elif not np.isfinite(sd):
        return "inconclusive: no seed variance to plan from"
    elif sd == 0:
        return "inconclusive: no seed-to-seed variation in either condition; power cannot be planned"
    else:
        head = f"inconclusive: {seeds_text(n1, n2)} detect >= {fmt(mdd_value)}"
    if not np.isfinite(sd) or sd == 0:
        return head
    if math.isinf(needed):
        return f"{head}; more than {MAX_SEEDS} seeds would be needed to detect {fmt(effect)}"
    if np.isfinite(needed):
        return f"{head}; {int(needed)} seeds would detect {fmt(effect)}"
    return head


__all__ = ["POWER", "mdd", "pooled_sd", "power_line", "seeds_needed", "seeds_text"]
