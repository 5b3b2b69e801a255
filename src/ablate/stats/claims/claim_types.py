"""Claim types, each a small registered class: what it must declare, how its interval decides, and
what the verdict label says the interval excluded. The engine, the parser and the renderers ask the
registry (`CLAIM_TYPES[claim.kind]`), so a new type is one class here and nothing else:

    @CLAIM_TYPES.register
    class AtLeast(ClaimType):
        name = "at_least"
        @dataclass(frozen=True)
        class Keys:                      # the keys it reads beyond the common ones (schema.ClaimKeys)
            floor: float = key(None, "the difference it must exceed")
        def decide(self, c, lo, hi): ...  # c.get("floor"): the number as its field's type reads it

(tests/test_stats_claim_types.py adds one this way). `lo`, `hi` are the interval of d x difference,
d the claimed direction (+1 higher, -1 lower), so every rule reads "higher is the claim".
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, fields, replace
from types import SimpleNamespace
from typing import Any, Mapping, NamedTuple

import numpy as np
import scipy.stats

from ablate.registry import Registry
from ablate.stats.claims.schema import key
from ablate.stats.maths import level, rates
from ablate.stats.maths.verdicts import Estimate, rate_or_welch, welch_vs_measured

# a claim's `type` -> one instance of its class (`@CLAIM_TYPES.register` on the class, under its `name`)
CLAIM_TYPES = Registry("type", entry=lambda name, cls: cls())


class Decision(NamedTuple):
    verdict: str  # replicated / not replicated / inconclusive / descriptive
    excluded: str  # what the interval excluded, for the label ("" when nothing decisive)
    reason: str


def label(verdict: str, excluded: str) -> str:
    """`replicated (excludes 0)`: the verdict and what its interval excluded."""
    return f"{verdict} (excludes {excluded})" if excluded else verdict


@dataclass(frozen=True)
class NoKeys:
    """A type that reads only the common keys (schema.ClaimKeys)."""


class ClaimType(abc.ABC):
    name = ""
    Keys: type = NoKeys  # a dataclass: the claim keys this type reads beyond the common ones, as schema fields
    words = ""  # a regex: a claim sentence matching it must be of this type (checked at declaration)
    in_family = True

    @property
    def keys(self) -> tuple[str, ...]:
        """The names of the keys this type reads beyond the common ones."""
        return tuple(f.name for f in fields(self.Keys))

    def check(self, claim, raw: Mapping, problems: list[str]) -> None:
        """Declaration-time problems of a claim of this type (one line each, naming the fix)."""

    @abc.abstractmethod
    def decide(self, claim, lo: float, hi: float) -> Decision:
        """The verdict from the interval [lo, hi] of d x difference (every registered type says its rule)."""

    def values(self, claim, v: np.ndarray) -> np.ndarray:
        """The per-seed values the claim is about (default: the metric's own)."""
        return v

    def estimate(self, claim, xs: np.ndarray, ys: np.ndarray | None, confidence: float,
                 trials: tuple | None = None) -> Estimate:
        """The difference and its interval at `confidence` (default: Welch's, or the one-sample t; an arm of a
        rate metric with no events on any seed: its exact Clopper-Pearson bound, `trials` its trial counts)."""
        if ys is None and claim.null_se > 0:  # a bar one evaluation measured: its error enters the interval
            return welch_vs_measured(xs, claim.null, claim.null_se, confidence)
        return rate_or_welch(xs, ys, confidence, claim.null, trials)

    def exact_p(self, claim, xs: np.ndarray, ys: np.ndarray) -> float | None:
        """The randomization p-value over seed labels for the claim's 'replicated' side (None: this type
        has none, and `test: randomization` cannot decide it; the declaration check says so)."""
        return None

    @property
    def has_exact_test(self) -> bool:
        return type(self).exact_p is not ClaimType.exact_p

    def refute_nulls(self, claim) -> tuple[tuple[int, float], ...]:
        """The one-sided nulls a 'not replicated' rejects, as `level.randomization_p`'s (direction, delta)
        (H0: direction * difference <= delta): the verdict stands when the exact test rejects one of them
        (default none: the type has no futility side)."""
        return ()

    def refute_p(self, claim, xs: np.ndarray, ys: np.ndarray) -> float:
        """The randomization p for the 'not replicated' side: the smallest over `refute_nulls`."""
        return min((level.randomization_p(xs, ys, d, delta) for d, delta in self.refute_nulls(claim)), default=1.0)

    def refute_apart(self, claim, xs, ys) -> bool:
        """Every seed beyond every seed of the other arm on a 'not replicated' side, in the values its exact
        test reads (x - direction * delta)."""
        return any(bool(level.separated(np.asarray(xs) - d * delta, ys, d)) for d, delta in self.refute_nulls(claim))

    def guard(self, claim, verdict: str, reason: str, xs, ys, alpha: float, test: str) -> tuple[str, str]:
        """A look's verdict once the study's `test` has had its say. Under `randomization`: a two-sample
        'replicated' or 'not replicated' by level.guard with the exact test of that verdict's null; a
        one-sample one by the exact sign test (level.sign_guard)."""
        if test != "randomization" or not self.in_family or verdict not in level.GUARDED:
            return verdict, reason
        if ys is None:
            return level.sign_guard(verdict, reason, xs, alpha, lambda: self.sign_p(claim, xs, verdict, alpha))
        if verdict == "not replicated":
            if not self.refute_nulls(claim):
                return verdict, reason
            return level.guard(verdict, reason, xs, ys, alpha, lambda: self.refute_p(claim, xs, ys),
                               self.refute_apart(claim, xs, ys))
        if not self.has_exact_test:
            return "inconclusive", (f"{reason}; type {self.name} has no randomization test (declare "
                                    "`test: welch`, or give the type an `exact_p`)")
        return level.guard(verdict, reason, xs, ys, alpha, lambda: self.exact_p(claim, xs, ys),
                           self.apart(claim, xs, ys))

    def sign_p(self, claim, xs, verdict: str, alpha: float = 0.0) -> float:
        """A one-sample verdict's exact sign test against the claim's bar: 'replicated' reads the
        'replicated' null at delta 0 (superiority) or -margin (non-inferiority), 'not replicated' the
        smallest over `refute_nulls`. A type with neither side: 1 (the guard keeps it open). A measured bar
        (`against_eval`, SE s) is moved against the verdict by its one-sided bound at a tenth of the guard's
        level (alpha / 20), and that tenth is added to p (Bonferroni): the guard's level holds whatever
        the evaluation's error was."""
        share = alpha / 20.0 if claim.null_se > 0 and alpha > 0 else 0.0
        shift = float(scipy.stats.norm.isf(share)) * claim.null_se if share else 0.0
        if verdict == "replicated":  # every null of that side rejected
            p = max((level.sign_p(xs, claim.null + d * (delta + shift), d) for d, delta in self.replicate_nulls(claim)),
                    default=1.0)
        else:
            p = min((level.sign_p(xs, claim.null + d * (delta + shift), d) for d, delta in self.refute_nulls(claim)),
                    default=1.0)
        return min(1.0, p + share)

    def replicate_nulls(self, claim) -> tuple[tuple[int, float], ...]:
        """The one-sided nulls a 'replicated' rejects, all of them, as (direction, delta) (superiority: the
        claimed direction at 0); the one-sample sign guard reads them."""
        return ((claim.direction, 0.0),)

    def apart(self, claim, xs, ys) -> bool:
        """Whether every seed of the condition lies beyond every seed of the baseline on the side the exact
        test's 'replicated' reads (level.separated): then no spread can fake the result and the guard lets
        the exact test decide (default: no such side, e.g. a two-sided equivalence)."""
        return False

    def settled_spread(self, claim, xs, ys, test: str) -> float | None:
        """The low end of the arms' SD ratio when the spread guard is expected to refuse them at any n
        (level.spread_settled), else None: more seeds cannot decide the claim then (fully separated seeds
        are not refused, so more of them can)."""
        if test != "randomization" or not self.in_family or ys is None or not self.has_exact_test:
            return None
        return None if self.apart(claim, xs, ys) else level.spread_settled(xs, ys)

    def floor(self, claim, n: int, m: int, test: str) -> float:
        """The smallest one-sided p the look's exact test can reach at n vs m seeds (0: no such test)."""
        return level.floor_p(n, m) if test == "randomization" and claim.baseline is not None else 0.0

    def target(self, claim) -> float:
        """The effect the seeds-needed plan is for (NaN: the study's default)."""
        return claim.margin

    def claimed(self, claim) -> str:
        """The 'claimed' cell of the tables."""
        return self.name.replace("_", "-")

    def prepare(self, claim, decided: Mapping[str, Mapping]) -> tuple[Any, str]:
        """(the claim to decide, '' or why it is not testable) given the rows of the claims decided
        before it (by id): a claim that `requires` another is not testable until that one replicated."""
        need = getattr(claim, "requires", None)
        if not need:
            return claim, ""
        row = decided.get(need)
        if row is None or row.get("verdict") != "replicated":
            return claim, f"requires {need}, which is {row.get('verdict') if row else 'not decided'}: not established"
        return claim, ""


@CLAIM_TYPES.register
class Superiority(ClaimType):
    name = "superiority"

    def check(self, claim, raw, problems):
        if not (claim.bar > 0):
            problems.append(f"claim {claim.id!r}: a superiority claim needs its smallest effect of interest: give "
                            "`effect` (in the metric's units; the paper's effect stands in when `paper` is given)")

    def decide(self, claim, lo, hi):
        bar = claim.bar
        if lo > 0:
            if hi < bar:
                return Decision("not replicated", "0 and the effect of interest",
                                f"a real effect, smaller than the effect of interest ({bar:.3g})")
            return Decision("replicated", "0", "the interval excludes 0 on the claimed side")
        if hi < 0:
            return Decision("not replicated", "0 and the effect of interest", "significant in the other direction")
        if hi < bar:
            return Decision("not replicated", "the effect of interest",
                            f"the interval excludes the effect of interest ({bar:.3g})")
        return Decision("inconclusive", "", "the interval holds both 0 and the effect of interest")

    def target(self, claim):
        return claim.bar

    def exact_p(self, claim, xs, ys):  # H0: d * diff <= 0
        return level.randomization_p(xs, ys, claim.direction, 0.0)

    def apart(self, claim, xs, ys):
        return bool(level.separated(xs, ys, claim.direction))

    def refute_nulls(self, claim):  # 'not replicated': the difference is below the effect of interest
        return ((-claim.direction, -claim.bar),)

    def claimed(self, claim):
        whose = "" if math.isfinite(claim.effect) else " (the paper's)"
        return f"superiority, {'higher' if claim.direction > 0 else 'lower'}; effect of interest {claim.bar:.3g}{whose}"


def needs_margin(kind: str, claim, problems: list[str]) -> None:
    """A margin-type claim's declaration check: its positive `margin`, in the metric's units."""
    if not math.isfinite(claim.margin):
        article = "an" if kind[0] in "aeiou" else "a"
        problems.append(f"claim {claim.id!r}: {article} {kind} claim needs a positive `margin` (in the metric's units)")


@CLAIM_TYPES.register
class NonInferiority(ClaimType):
    name = "non_inferiority"

    def check(self, claim, raw, problems):
        needs_margin(self.name, claim, problems)

    def decide(self, claim, lo, hi):
        m = claim.margin
        if lo > -m:
            return Decision("replicated", f"a loss of {m:.3g}", f"the interval excludes a loss of the margin ({m:.3g})")
        if hi < -m:
            return Decision("not replicated", f"a loss under {m:.3g}", f"worse by more than the margin ({m:.3g})")
        return Decision("inconclusive", "", f"the interval holds a loss of the margin ({m:.3g})")

    def exact_p(self, claim, xs, ys):  # H0: d * diff <= -margin (keeps_gain: its margin a share of the gain)
        return level.randomization_p(xs, ys, claim.direction, -claim.margin)

    def apart(self, claim, xs, ys):  # the values the exact test reads: x shifted by the margin
        return bool(level.separated(np.asarray(xs) + claim.direction * claim.margin, ys, claim.direction))

    def refute_nulls(self, claim):  # 'not replicated': worse by more than the margin
        return ((-claim.direction, claim.margin),)

    def replicate_nulls(self, claim):
        return ((claim.direction, -claim.margin),)

    def claimed(self, claim):
        return f"non-inferiority, margin {claim.margin:.3g}"


@CLAIM_TYPES.register
class KeepsGain(NonInferiority):
    """Keeps most of a gain another claim established: non-inferiority with the margin a share of that
    gain, the lower end of its interval (the gain the data guarantee), and not testable until it replicated."""

    name = "keeps_gain"

    @dataclass(frozen=True)
    class Keys:
        requires: str = key(None, "the claim that establishes the gain")
        margin_share: float = key(None, "the share of that gain that may be lost, in (0, 1)", positive=True)

    words = r"\bmost of\b"

    def check(self, claim, raw, problems):
        share = claim.margin_share
        if not claim.requires or not (0 < share < 1):
            problems.append(f"claim {claim.id!r}: a keeps_gain claim names the claim that establishes the gain "
                            "(`requires: <claim id>`) and the share of it that may be lost (`margin_share`, in (0, 1))")

    def prepare(self, claim, decided):
        claim, blocked = super().prepare(claim, decided)
        if blocked:
            return claim, blocked
        row = decided[claim.requires]
        gain = row["ci_low"] if row["direction"] == "higher" else -row["ci_high"]
        return replace(claim, margin=claim.margin_share * gain), ""

    def claimed(self, claim):
        m = f", margin {claim.margin:.3g}" if math.isfinite(claim.margin) else ""
        return f"keeps-gain, loses < {claim.margin_share:.0%} of {claim.requires}'s gain{m}"


@CLAIM_TYPES.register
class Equivalence(ClaimType):
    name = "equivalence"

    def check(self, claim, raw, problems):
        needs_margin(self.name, claim, problems)

    def decide(self, claim, lo, hi):
        m = claim.margin
        if -m < lo and hi < m:
            return Decision("replicated", f"effects beyond ±{m:.3g}", f"the interval lies inside ±{m:.3g}")
        if lo > m or hi < -m:
            return Decision("not replicated", f"effects within ±{m:.3g}", f"the interval lies outside ±{m:.3g}")
        return Decision("inconclusive", "", f"the interval crosses ±{m:.3g}")

    def exact_p(self, claim, xs, ys):  # two one-sided tests at -margin and +margin (TOST)
        return max(level.randomization_p(xs, ys, +1, -claim.margin), level.randomization_p(xs, ys, -1, -claim.margin))

    def refute_nulls(self, claim):  # 'not replicated': beyond +margin or below -margin
        return ((+1, claim.margin), (-1, claim.margin))

    def replicate_nulls(self, claim):
        return ((+1, -claim.margin), (-1, -claim.margin))

    def claimed(self, claim):
        return f"equivalence, margin ±{claim.margin:.3g}"


@CLAIM_TYPES.register
class Bounded(ClaimType):
    """A small effect: the difference lies between two bounds (`bounds: [low, high]`, in the claimed
    direction), e.g. 'adds little' = [0, the smallest effect of interest]."""

    name = "bounded"

    @dataclass(frozen=True)
    class Keys:
        bounds: Any = key(None, "[low, high] of the difference, in the claimed direction")

    words = r"\b(little|small|slight|slightly|modest)\b"

    def check(self, claim, raw, problems):
        b = claim.bounds
        if b is None or not (b[0] < b[1]):
            problems.append(f"claim {claim.id!r}: a bounded claim ('adds little') needs both bounds, "
                            "`bounds: [low, high]` with low < high (in the metric's units, the claimed direction)")

    def decide(self, claim, lo, hi):
        a, b = claim.bounds
        if a < lo and hi < b:
            return Decision("replicated", f"effects outside [{a:.3g}, {b:.3g}]", f"the interval lies inside [{a:.3g}, {b:.3g}]")
        if lo > b or hi < a:
            return Decision("not replicated", f"effects within [{a:.3g}, {b:.3g}]",
                            f"the interval lies outside [{a:.3g}, {b:.3g}]")
        return Decision("inconclusive", "", f"the interval crosses a bound of [{a:.3g}, {b:.3g}]")

    def target(self, claim):
        return (claim.bounds[1] - claim.bounds[0]) / 2

    def exact_p(self, claim, xs, ys):  # the larger of H0: d * diff <= low and H0: d * diff >= high
        a, b = claim.bounds
        return max(level.randomization_p(xs, ys, claim.direction, a), level.randomization_p(xs, ys, -claim.direction, -b))

    def refute_nulls(self, claim):  # 'not replicated': above the high bound or below the low one
        a, b = claim.bounds
        return ((claim.direction, b), (-claim.direction, -a))

    def replicate_nulls(self, claim):
        a, b = claim.bounds
        return ((claim.direction, a), (-claim.direction, -b))

    def claimed(self, claim):
        return f"bounded, in [{claim.bounds[0]:.3g}, {claim.bounds[1]:.3g}]"


@CLAIM_TYPES.register
class Descriptive(ClaimType):
    name = "descriptive"
    in_family = False

    def decide(self, claim, lo, hi):
        return Decision("descriptive", "", "describes; outside the family, decides nothing")


@CLAIM_TYPES.register
class SuccessRate(Superiority):
    """More seeds of the condition than of the baseline meet `success:` (a recover / collapse outcome,
    bimodal over seeds, where no test of means holds its level): the seeds' 0/1 outcomes, the rate
    difference's Newcombe interval, and Fisher's exact test at the look's one-sided level (rates.py); a
    'not replicated' also needs the exact unconditional test of "the rates differ by the effect of
    interest" (rates.shifted_p) at that level. `effect` is in rate units (a share of seeds)."""

    name = "success_rate"

    def check(self, claim, raw, problems):
        if claim.success is None or claim.baseline is None or not (0 < claim.bar <= 1):
            problems.append(f"claim {claim.id!r}: a success_rate claim compares the share of seeds meeting "
                            "`success: '>=threshold'` between its condition and a `baseline`, with its `effect` "
                            "of interest a share of seeds in (0, 1]")

    def values(self, claim, v):
        return rates.meets(v, *claim.success)

    def estimate(self, claim, xs, ys, confidence, trials=None):  # counts of seeds: the metric's trials do not apply
        k, n, j, m = int(xs.sum()), xs.size, int(ys.sum()), ys.size
        if n < 1 or m < 1:
            return Estimate(math.nan, math.nan, math.nan, math.nan, math.nan, "no seeds")
        lo, hi = rates.newcombe(k, n, j, m, confidence)
        return Estimate(k / n - j / m, lo, hi, rates.two_sided_p(k, n, j, m), math.nan)

    def guard(self, claim, verdict, reason, xs, ys, alpha, test):
        k, n, j, m = int(xs.sum()), xs.size, int(ys.sum()), ys.size
        one_sided = alpha / 2.0
        if verdict == "not replicated":  # the exact test of "the rates differ by the effect of interest"
            p = rates.shifted_p(k, n, j, m, claim.direction * claim.bar)
            if not p <= one_sided:
                return "inconclusive", (f"the rate interval excludes the effect of interest, the exact test of "
                                        f"a difference of {claim.direction * claim.bar:g} does not "
                                        f"(p {p:.2g} > {one_sided:.2g})")
            return verdict, f"{reason}; exact test of a difference of {claim.direction * claim.bar:g}: p {p:.2g} <= {one_sided:.2g}"
        if verdict != "replicated":
            return verdict, reason
        if level.floor_p(n, m) > one_sided:  # Fisher's smallest p is the randomization test's floor
            return "inconclusive", (f"undecidable at {n} vs {m} seeds: the exact test's smallest p "
                                    f"1/{math.comb(n + m, n)} exceeds the one-sided level {one_sided:.2g} "
                                    f"(needs {level.seeds_to_decide(one_sided)} seeds per arm)")
        p = rates.exact_p(k, n, j, m, claim.direction)
        if p > one_sided:
            return "inconclusive", (f"the rate interval decides, Fisher's exact test does not "
                                    f"(p {p:.2g} > {one_sided:.2g})")
        return verdict, f"{reason}; Fisher's exact test p {p:.2g} <= {one_sided:.2g}"

    def floor(self, claim, n, m, test):
        return level.floor_p(n, m)  # its exact test's, whatever the study's test

    def settled_spread(self, claim, xs, ys, test):
        return None  # Fisher's test of shares has no spread guard

    def claimed(self, claim):
        op, thr = claim.success
        return (f"success rate ({op} {thr:g}), {'higher' if claim.direction > 0 else 'lower'}; "
                f"effect of interest {claim.bar:.3g} of seeds")


def decide(claim, low: float, high: float) -> tuple[str, str, str]:
    """(verdict, what the interval excluded, reason) for the interval [low, high] of the difference,
    by the claim's type (ablate.stats.claims.claim_types)."""
    rule = CLAIM_TYPES[claim.kind]
    if not rule.in_family:  # descriptive: no verdict, whatever the interval
        return tuple(rule.decide(claim, low, high))
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive", "", "no interval (too few seeds)"
    lo, hi = (low, high) if claim.direction >= 0 else (-high, -low)
    return tuple(rule.decide(claim, lo, hi))


def verdict(kind: str, direction: int, low: float, high: float, *, effect: float = math.nan,
            margin: float = math.nan, bounds=None) -> tuple[str, str]:
    """(verdict, reason) for an interval of the difference under a claim of type `kind`."""
    if kind not in CLAIM_TYPES:
        raise ValueError(f"unknown claim type {kind!r}; choose one of {', '.join(CLAIM_TYPES)}")
    claim = SimpleNamespace(kind=kind, direction=direction, bar=abs(effect) if math.isfinite(effect) else 0.0,
                            effect=effect, margin=margin, bounds=bounds)
    v, _, why = decide(claim, low, high)
    return v, why
