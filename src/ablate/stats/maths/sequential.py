"""Group-sequential boundaries by Lan-DeMets alpha spending (pure maths).

A study declares its seed plan before the runs: looks at n_1 < n_2 < ... < n_K seeds per arm and a
spending function alpha(t) that says how much of the claim's two-sided level has been used by
information fraction t. At each look the claim's test is compared with a nominal level such that the
probability of ever rejecting a true null over all looks taken is alpha. Looks need not fall on the
planned seed counts: the spending function gives the boundary for any increasing information
fractions, which is why a look made outside the plan can still be reported with a valid level.

No maintained Python package computes these boundaries (R's gsDesign and rpact do); the recursion is
short with scipy's multivariate normal CDF, and the tests check it against gsDesign's published
bounds. The boundaries are for Z statistics; a look's t statistic is compared through its nominal
p-value (the usual practice for small samples), and the calibration harness measures what that does
to the error rate at the seed counts studies use.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np
import scipy.optimize
import scipy.stats

SPENDING = ("obrien_fleming", "pocock")


def spent(t: float, alpha: float, kind: str) -> float:
    """Two-sided alpha spent by information fraction t (0 <= t <= 1), Lan-DeMets' approximations.

    obrien_fleming: each side spends 2 - 2 Phi(z_{1-alpha/4} / sqrt(t)) of its alpha/2 (gsDesign's
    sfLDOF on each side of a symmetric two-sided design); pocock: alpha ln(1 + (e - 1) t).
    """
    if kind not in SPENDING:
        raise ValueError(f"unknown spending function {kind!r}; choose one of {', '.join(SPENDING)}")
    t = min(max(float(t), 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    z = scipy.stats.norm.isf(alpha / 4.0)
    return 2.0 * (2.0 - 2.0 * scipy.stats.norm.cdf(z / math.sqrt(t)))


def _inside(bounds: Sequence[float], fractions: Sequence[float]) -> float:
    """P(|Z_j| < c_j for every look j) for the canonical joint distribution of the Z statistics:
    corr(Z_i, Z_j) = sqrt(t_i / t_j), i < j."""
    t = np.asarray(fractions, dtype=np.float64)
    c = np.asarray(bounds, dtype=np.float64)
    if t.size == 1:
        return float(1.0 - 2.0 * scipy.stats.norm.sf(c[0]))
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    mvn = scipy.stats.multivariate_normal(mean=np.zeros(t.size), cov=cov, allow_singular=True)
    return float(mvn.cdf(c, lower_limit=-c, rng=np.random.default_rng(0)))


def z_bounds(fractions: Sequence[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    return list(_z_bounds(tuple(float(t) for t in fractions), float(alpha), kind))


@functools.lru_cache(maxsize=4096)
def _z_bounds(fractions: tuple[float, ...], alpha: float, kind: str) -> tuple[float, ...]:
    """Two-sided symmetric bounds c_k on |Z| at looks with the given information fractions.

    Fractions must increase; fractions above 1 are looks past the plan's end and are capped at 1, so a
    look past the end after the last planned one spends nothing (bound +inf).
    """
    bounds: list[float] = []
    kept: list[float] = []
    last_spent = 0.0
    if any(b <= a for a, b in zip(fractions, fractions[1:])):
        raise ValueError(f"information fractions must increase, got {list(fractions)}")
    for t in fractions:
        t = min(float(t), 1.0)
        if kept and t <= kept[-1]:  # a second look past the plan's end: nothing left to spend
            bounds.append(math.inf)
            continue
        target = spent(t, alpha, kind)
        if target - last_spent <= 1e-12:
            c = math.inf
        elif not bounds:
            c = float(scipy.stats.norm.isf(target / 2.0))
        else:
            prev = list(bounds)

            def gap(c_k: float) -> float:
                return (1.0 - _inside(prev + [c_k], kept + [t])) - target

            c = float(scipy.optimize.brentq(gap, 0.5, 12.0, xtol=1e-6))
        bounds.append(c)
        kept.append(t)
        last_spent = max(last_spent, target)
    return tuple(bounds)


def nominal_levels(fractions: Sequence[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """The two-sided nominal p-value threshold at each look: 2 (1 - Phi(c_k))."""
    return [0.0 if math.isinf(c) else float(2.0 * scipy.stats.norm.sf(c)) for c in z_bounds(fractions, alpha, kind)]


def information(n1: int, n2: int) -> float:
    """Statistical information of a difference of two means with n1 and n2 seeds, per unit variance."""
    return 1.0 / (1.0 / n1 + 1.0 / n2) if n1 > 0 and n2 > 0 else 0.0
