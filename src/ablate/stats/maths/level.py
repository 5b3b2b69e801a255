"""The randomization test over seed labels, and the level guard studies decide under by default (pure maths).

Welch's t-interval holds its level where the seed values are near normal, but not at the study's
per-claim levels (0.001-0.008) with a handful of seeds and arms unlike each other: docs/stats.md's
level table measures it (3 vs 3 at an SD ratio of 4: ~1.5x nominal; a bimodal arm at 5 vs 5: >10x).
A study under `test: randomization` (the default) decides a two-sample claim only when Welch's interval
decides it AND the exact randomization test over seed labels agrees at the claim's one-sided level:
under "the recipe changes nothing" (the arms' seed values exchangeable) that test is exact at any n,
so the pair's level is at most its own. Where the arms' seed SDs differ more than SPREAD_MAX-fold
(a bimodal arm, an arm with no seed variance, SD ratios of 4-12) the means' null is not "the recipe
changes nothing", no test of means holds its level at these n, and the look is undecidable, unless the
seeds are fully separated (every seed of one arm beyond every seed of the other, on the claimed side):
then "the recipe changes nothing" is what the data refute, the randomization p is exact for it whatever
the spreads, and it decides (`separated`). Its smallest attainable p-value is 1 / C(n + m, n): 5 vs 5
cannot go below 1/252, 3 vs 3 below 1/20, so a look at which that floor exceeds the level is
**undecidable at this n**, and a plan whose first look is undecidable is refused at declaration with
the seeds it needs (`first_look_problems`).

The statistic is Welch's t of the relabelled arms (studentized: the permutation test of a
studentized statistic stays asymptotically valid when the arms' variances differ, Janssen 1997;
Chung & Romano 2013), one-sided in the claimed direction, the arm x shifted by the claim's margin for
non-inferiority and equivalence (a shift model). All C(n + m, n) relabellings are enumerated up to
EXACT_MAX; beyond that a seeded Monte-Carlo sample of RESAMPLES relabellings gives the valid
p = (1 + #{stat >= observed}) / (R + 1).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Sequence

import numpy as np
import scipy.stats

from ablate.stats.maths.sequential import spent

TESTS = ("randomization", "welch")
# A study that says nothing is decided with the exact guard: Welch alone breaks its level with a bimodal
# arm or unequal spreads at these seed counts (docs/stats.md's level table); `test: welch` stays available.
DEFAULT_TEST = "randomization"
SPREAD_MAX = 3.0  # arms whose seed SDs differ more than this: a mean test's level is unknown at these n
EXACT_MAX = 200_000
RESAMPLES = 20_000


def floor_p(n: int, m: int) -> float:
    """The smallest one-sided p-value an exact randomization test of n vs m seeds can give: 1 / C(n+m, n)."""
    return 1.0 / math.comb(n + m, n)


def seeds_to_decide(level: float) -> int:
    """The fewest seeds per arm (equal arms) whose randomization floor is at most `level` (one-sided)."""
    n = 2
    while floor_p(n, n) > level:
        n += 1
    return n


def welch_t(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Welch's t of mean(x) - mean(y) along the last axis (x: [..., n], y: [..., m]); +-inf where both
    arms have no spread and the means differ, 0 where they do not."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    d = x.mean(-1) - y.mean(-1)
    se = np.sqrt(x.var(-1, ddof=1) / x.shape[-1] + y.var(-1, ddof=1) / y.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d / se
    return np.where(se > 0, t, np.where(d == 0, 0.0, np.sign(d) * np.inf))


@functools.lru_cache(maxsize=64)
def _relabellings(n: int, m: int) -> np.ndarray:
    """Every assignment of n of the n + m pooled seeds to arm x: a [C(n+m, n), n+m] 0/1 mask (float64, the
    dtype `_stats` multiplies with, so a cached mask is not converted again at every call)."""
    idx = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n + m), n)), dtype=np.int32)
    mask = np.zeros((idx.size // n, n + m), dtype=np.float64)
    mask[np.repeat(np.arange(idx.size // n), n), idx] = 1.0
    return mask


def _stats(pooled: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Welch's t of every relabelling (rows of mask: arm x), from sums (one matrix product each)."""
    n = int(mask[0].sum())
    m = pooled.size - n
    c = pooled - pooled.mean()  # centred: the sums of squares lose no precision
    mx = mask if mask.dtype == np.float64 else mask.astype(np.float64)
    sx, qx = mx @ c, mx @ (c * c)
    sy, qy = c.sum() - sx, (c * c).sum() - qx
    vx = np.maximum(qx - sx * sx / n, 0.0) / (n - 1)
    vy = np.maximum(qy - sy * sy / m, 0.0) / (m - 1)
    d = sx / n - sy / m
    se = np.sqrt(vx / n + vy / m)
    with np.errstate(divide="ignore", invalid="ignore"):  # both branches are evaluated: 0 * inf where d is 0
        t = d / se
        return np.where(se > 1e-15 * (1.0 + np.abs(c).max()), t,
                        np.where(np.abs(d) <= 1e-15, 0.0, np.sign(d) * np.inf))


def randomization_p(x: Sequence[float], y: Sequence[float], direction: int = 1, delta: float = 0.0,
                    seed: int = 0) -> float:
    """One-sided p of H0: direction * (mean x - mean y) <= delta, by relabelling seeds (x, y: 1-D).

    The test reads x - direction * delta against y (under a shift model the boundary of H0 is then
    "no difference"), with Welch's t as the statistic. Exact over all C(n+m, n) relabellings when
    that count is at most EXACT_MAX, else a Monte-Carlo sample of RESAMPLES (seeded: reproducible).
    """
    x = np.asarray(x, dtype=np.float64) - direction * delta
    y = np.asarray(y, dtype=np.float64)
    n, m = x.size, y.size
    if n < 2 or m < 2:
        return math.nan
    pooled = np.concatenate([x, y])
    observed = float(direction * welch_t(x, y))
    if math.comb(n + m, n) <= EXACT_MAX:
        stats, extra = direction * _stats(pooled, _relabellings(n, m)), 0
    else:
        rng = np.random.default_rng(seed)
        order = np.argsort(rng.random((RESAMPLES, n + m)), axis=1)[:, :n]
        mask = np.zeros((RESAMPLES, n + m), dtype=bool)
        np.put_along_axis(mask, order, True, axis=1)
        stats, extra = direction * _stats(pooled, mask), 1  # the observed labelling counts once more
    tol = 1e-9 * max(1.0, abs(observed)) if math.isfinite(observed) else 0.0
    hits = int(np.sum(stats >= observed - tol))
    return (hits + extra) / (stats.size + extra)


def spread_ratio(x, y) -> np.ndarray:
    """The larger arm's seed SD over the smaller's, along the last axis (inf when one arm has none)."""
    sx = np.asarray(x, dtype=np.float64).std(-1, ddof=1)
    sy = np.asarray(y, dtype=np.float64).std(-1, ddof=1)
    hi, lo = np.maximum(sx, sy), np.minimum(sx, sy)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lo > 0, hi / lo, np.where(hi > 0, np.inf, 1.0))


def separated(x, y, direction: int = 1) -> np.ndarray:
    """Along the last axis: every seed of x beyond every seed of y on the `direction` side (+1: min x > max y,
    -1: max x < min y). Then the observed labelling is the most extreme one and no spread can fake it."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if direction > 0:
        return x.min(-1) > y.max(-1)
    return x.max(-1) < y.min(-1)


def spread_settled(x, y, confidence: float = 0.975) -> float | None:
    """The low end of the arms' seed-SD ratio (larger over smaller) at one-sided `confidence`, from the F
    interval of the variance ratio, when that low end is over SPREAD_MAX, else None. Then the guard is
    expected to refuse the pair at any seed count, so a plan gains nothing by adding seeds (normal
    arms assumed: the interval only stops looks, which never raises the level)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return None
    df = (x.size - 1, y.size - 1) if x.std(ddof=1) >= y.std(ddof=1) else (y.size - 1, x.size - 1)  # larger arm first
    low = float(spread_ratio(x, y)) / math.sqrt(scipy.stats.f.ppf(confidence, *df))
    return low if low > SPREAD_MAX else None


GUARDED = ("replicated", "not replicated")  # the verdicts an exact test must confirm under `test: randomization`


def guard(verdict: str, reason: str, x, y, alpha: float, p_value, apart: bool = False) -> tuple[str, str]:
    """A look's verdict under `test: randomization`: a 'replicated' or a 'not replicated' (futility: the
    interval excludes the effect of interest) stands only when the randomization test of that verdict's
    own one-sided null agrees at alpha / 2 (the one-sided level of the claim's two-sided interval); where
    n vs m cannot reach that level at all, the look is undecidable at this n; where the arms' spreads
    differ over SPREAD_MAX-fold, too, unless the seeds are fully separated on the verdict's side (`apart`:
    `separated` of the values the exact test reads), where the exact test decides. `p_value()`: the claim
    type's randomization p for that side (claim_types.ClaimType.exact_p / refute_p), computed only when
    needed. One-sample claims (y None) have their own guard (`sign_guard`); other verdicts pass."""
    if verdict not in GUARDED or y is None or alpha <= 0:  # no alpha: the engine says so itself
        return verdict, reason
    n, m = len(x), len(y)
    level = alpha / 2.0
    floor = floor_p(n, m)
    if floor > level:
        return _undecidable(f"{n} vs {m} seeds: the randomization test's smallest p 1/{math.comb(n + m, n)} exceeds "
                            f"the one-sided level {level:.2g} (needs {seeds_to_decide(level)} seeds per arm)",
                            "Welch", verdict, reason)
    ratio = float(spread_ratio(x, y))
    if ratio > SPREAD_MAX and not apart:
        return _undecidable(f"{n} vs {m} seeds: the arms' seed SDs differ {ratio:.3g}-fold (> {SPREAD_MAX:g}), where no "
                            "test of means holds its level at these n (docs/stats.md, the level table)",
                            "Welch", verdict, reason)
    apart_note = (f" (the arms' seed SDs differ {ratio:.3g}-fold, but every seed of one arm lies beyond every seed "
                  "of the other: the test is exact for 'the recipe changes nothing')" if ratio > SPREAD_MAX else "")
    return _confirmed(verdict, reason, p_value(), level, ("Welch's interval", "the randomization test over seed labels",
                                                          "randomization test"), apart_note)


def _undecidable(why: str, interval: str, verdict: str, reason: str) -> tuple[str, str]:
    """An exact guard that cannot confirm at these seeds: inconclusive, with what the interval alone said."""
    return "inconclusive", f"undecidable at {why}; {interval} alone: {verdict}: {reason}"


def _confirmed(verdict: str, reason: str, p: float, level: float, names: tuple[str, str, str],
               note: str = "") -> tuple[str, str]:
    """The verdict when its exact test agrees at `level`, else inconclusive; names: (the interval, the exact
    test in a sentence, the exact test in the verdict's reason)."""
    interval, test, short = names
    if p > level:
        return "inconclusive", f"{interval} says {verdict}, {test} does not (p {p:.2g} > {level:.2g})"
    return verdict, f"{reason}; {short} p {p:.2g} <= {level:.2g}{note}"


def sign_p(x, null: float, direction: int = 1) -> float:
    """One-sided exact sign test of H0: the seeds' median of direction * (x - null) <= 0 (x: 1-D): the
    binomial tail of the seeds strictly beyond `null`, ties counted against the claim (conservative).
    Exact for any law of the seeds, with no symmetry assumed; its smallest p is 2^-n."""
    d = direction * (np.asarray(x, dtype=np.float64) - null)
    k = int(np.sum(d > 0))
    return float(scipy.stats.binom.sf(k - 1, d.size, 0.5))


def seeds_to_sign(level: float) -> int:
    """The fewest seeds whose sign-test floor 2^-n is at most `level`."""
    return max(1, math.ceil(-math.log2(level))) if level > 0 else 0


def sign_guard(verdict: str, reason: str, x, alpha: float, p_value) -> tuple[str, str]:
    """A one-sample look's verdict under `test: randomization`: a claim about one condition against a
    constant has no seed labels to exchange, and its t-interval breaks its level with skewed or bimodal
    seeds at these n (docs/stats.md's level table: 3-89x nominal). A 'replicated' or 'not replicated'
    stands only when the exact sign test of that verdict's null (`p_value()`, `sign_p`) agrees at
    alpha / 2; where 2^-n exceeds that level, the look is undecidable at n seeds."""
    if verdict not in GUARDED or alpha <= 0:
        return verdict, reason
    n, level = len(x), alpha / 2.0
    if 0.5 ** n > level:
        return _undecidable(f"{n} seeds: the exact sign test's smallest p 1/{2 ** n} exceeds the one-sided level "
                            f"{level:.2g} (needs {seeds_to_sign(level)} seeds)", "the t-interval", verdict, reason)
    return _confirmed(verdict, reason, p_value(), level, ("the t-interval", "the exact sign test over seeds", "sign test"))


def first_look_level(first: int, last: int, alpha: float, spending: str) -> float:
    """The nominal two-sided level of a plan's first look (equal arms): its spending at t = first/last."""
    return spent(first / last, alpha, spending)


def _fraction(p: float) -> str:
    """1/252 for a randomization floor (the reciprocal of a count), else the number."""
    inverse = 1.0 / p
    return f"1/{round(inverse)}" if abs(inverse - round(inverse)) < 1e-6 * inverse else f"{p:.2g}"


def first_look_problems(claims, looks: Sequence[int], spending: str, shares: dict[str, float],
                        floor=lambda claim, n: floor_p(n, n)) -> list[str]:
    """Each two-sample claim whose plan's first look cannot reach its level with its exact test
    (shares: claim id -> its initial alpha; floor(claim, n): that test's smallest one-sided p at n vs n
    seeds, 0 where the claim has no such test), with the seeds per arm the first look needs."""
    problems = []
    for c in claims:
        alpha = shares.get(c.id, 0.0)
        if c.baseline is None or alpha <= 0 or floor(c, looks[0]) <= 0:
            continue
        n, last = looks[0], looks[-1]
        level = first_look_level(n, last, alpha, spending) / 2.0
        if floor(c, n) <= level:
            continue
        k = n
        while floor(c, k) > first_look_level(k, max(k, last), alpha, spending) / 2.0:
            k += 1
        problems.append(f"claim {c.id!r}: the plan's first look ({n} vs {n} seeds) cannot decide it at its level "
                        f"(alpha {alpha:.3g}: one-sided {level:.2g} at the first look): its exact test's smallest "
                        f"p there is {_fraction(floor(c, n))}; give plan.looks a first look of "
                        f">= {k} seeds per arm, or the claim a larger share of alpha (multiplicity)"
                        + (", or plan.spending: pocock (it spends more at the first look)"
                           if spending != "pocock" and floor(c, n) <= first_look_level(n, last, alpha, "pocock") / 2.0
                           else ""))
    return problems
