"""Two arms' rates of seeds meeting a success threshold: the difference, its interval and an exact test
(pure maths).

A recover / collapse arm is bimodal: when its few seeds happen to land in one mode, no test of means can
tell it from an effect (docs/stats.md's level table: 2.69x nominal at alpha 0.025 on 5/10/20 even
under the randomization guard). A claim about such an arm is a claim about how often seeds recover, so
`type: success_rate` decides on the counts of seeds meeting `success:` in each arm:

* the test is Fisher's exact test (scipy.stats.fisher_exact), one-sided in the claimed direction: the
  randomization test over seed labels of the 0/1 outcomes, so its level holds for any common success
  probability at any n, and its smallest p (n/n against 0/m) is the randomization test's floor,
  `level.floor_p(n, m)` = 1 / C(n + m, n). (Boschloo's
  unconditional test is more powerful, but scipy's takes ~50 ms a table: too slow for the level harness.)
* the interval of the rate difference is Newcombe's hybrid score interval (statsmodels,
  `confint_proportions_2indep(method="newcomb")`): defined at 0/n and n/n, where the score inversion fails.

A look replicates only when both agree, and a look's "not replicated" (the interval excludes the effect
of interest) stands only when `shifted_p`, the exact unconditional test of "the rates differ by exactly
the effect of interest", agrees: Newcombe's interval alone gave that verdict at 2.5-5x its nominal rate on
the registered plans (`python -m ablate.studies.rate_levels`). Arguments: k successes of n seeds (x, the claim's condition),
j of m (y, its baseline); direction +1 claims x's rate is higher.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import scipy.stats
from statsmodels.stats.proportion import confint_proportions_2indep


def meets(values, op: str, threshold: float) -> np.ndarray:
    """[n] 0/1: each seed's value meets `op threshold` (op one of >=, <=, >, <)."""
    a = np.asarray(values, dtype=np.float64)
    return {">=": a >= threshold, "<=": a <= threshold, ">": a > threshold, "<": a < threshold}[op].astype(np.float64)


@functools.lru_cache(maxsize=65536)
def exact_p(k: int, n: int, j: int, m: int, direction: int = 1) -> float:
    """One-sided Fisher exact p of H0: rate_x <= rate_y (direction +1) or >= (direction -1)."""
    if n < 1 or m < 1:
        return math.nan
    table = [[k, j], [n - k, m - j]]
    alt = "greater" if direction > 0 else "less"
    return float(min(1.0, scipy.stats.fisher_exact(table, alternative=alt).pvalue))


@functools.lru_cache(maxsize=256)
def _newcombe_table(n: int, m: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's interval of k/n - j/m for every k <= n, j <= m ([n+1, m+1] lows and highs): one
    vectorised statsmodels call serves every look of these arm sizes."""
    k, j = np.meshgrid(np.arange(n + 1), np.arange(m + 1), indexing="ij")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        lo, hi = confint_proportions_2indep(k, n, j, m, method="newcomb", compare="diff", alpha=1.0 - confidence)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def newcombe(k: int, n: int, j: int, m: int, confidence: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval of k/n - j/m at `confidence`."""
    lo, hi = _newcombe_table(n, m, confidence)
    return float(lo[k, j]), float(hi[k, j])


def two_sided_p(k: int, n: int, j: int, m: int) -> float:
    """Twice the smaller one-sided exact p, at most 1 (the p-value column; decisions use one side)."""
    return min(1.0, 2.0 * min(exact_p(k, n, j, m, 1), exact_p(k, n, j, m, -1)))


NUISANCE = np.linspace(0.0, 1.0, 2001)  # the baseline rates the exact unconditional p is the supremum over


@functools.lru_cache(maxsize=65536)
def shifted_p(k: int, n: int, j: int, m: int, shift: float) -> float:
    """Exact unconditional p of H0: rate_x - rate_y = shift, against rate differences on 0's side of it
    (a 'not replicated' of an effect of interest `shift`, either sign): the supremum over the baseline's
    rate (a 2,001-point grid) of P(K/n - J/m at least as far from shift, towards 0, as observed), K and J
    independent binomials. The ordering is the observed difference's (exact for any ordering: the supremum
    makes it hold whatever the nuisance rate); Fisher's test cannot serve, being conditional on a common rate."""
    if n < 1 or m < 1 or shift == 0:
        return math.nan
    d = np.subtract.outer(np.arange(n + 1) / n, np.arange(m + 1) / m)  # [n+1, m+1] differences
    observed = k / n - j / m
    # at least as far towards 0: above the observed difference when the shift is negative, below it if positive
    extreme = (d >= observed - 1e-12) if shift < 0 else (d <= observed + 1e-12)
    py = NUISANCE[(NUISANCE + shift >= 0) & (NUISANCE + shift <= 1)]
    px = py + shift
    pk = scipy.stats.binom.pmf(np.arange(n + 1)[None, :], n, px[:, None])  # [grid, n+1]
    pj = scipy.stats.binom.pmf(np.arange(m + 1)[None, :], m, py[:, None])  # [grid, m+1]
    return float(min(1.0, np.einsum("gk,gj,kj->g", pk, pj, extreme.astype(np.float64)).max()))
