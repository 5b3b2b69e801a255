"""`python -m ablate.studies.calibrate_level`: the false-positive rate where the studies decide.

calibrate.py plants whole sweeps (per-prompt counts) and runs `analysis.claims_of` on each: exact, but a
few ms a sweep. The studies decide at per-claim levels of 0.001-0.008, where knowing a rate to +-30%
(95%) takes N = (1.96 / 0.3)^2 (1 - alpha) / alpha sweeps: 42,642 at 0.001, 14,186 at 0.003, 5,293 at
0.008 (`sweeps_for`). So this harness plants the per-seed values table (what `sweep_values` makes of a
sweep) and decides each sweep with `plan_rejections`, the engine's look rule vectorised over sweeps:
at each look of the plan Welch's test at the look's Pocock level (`sequential.nominal_levels`, as the
engine), a claim stopping at its first decisive look, and under `test: randomization` the same guard
(`level.randomization_p`, the function the engine calls). `--entry K` decides the first K sweeps of
every cell through `engine.evaluate` too and counts disagreements (tests/test_stats_level.py asserts
there are none); the curve regimes' values come from per-seed curves through the arithmetic of
`values.curve_value` / `reach.restricted_reach` (the same test checks them against those functions).

Every regime but the `futility:` ones is a null, and the table counts the verdict that would be an error:

* false positives (the first table): the claim (two directional superiority claims, i.e. a two-sided test
  at the claim's alpha) is false, so every "replicated" is a false positive. Planted per seed (pass@1
  scale, mean 0.35, seed SD 0.01): unequal SDs (ratio 1, 4, 12; equal means); a bimodal arm (60% recover
  at +0.04, 40% collapse at -0.06, within SD 0.005) against a normal arm of equal mean; both arms bimodal
  (the same law); one arm with no seed variance; three curve metrics of the same curve law in both arms
  (value_t = 0.5 (1 - exp(-t / tau)) + N(0, 0.01), tau = 40 exp(N(0, 0.5)), steps 0..99): slope @50:99,
  auc @0:99 and reach >= 0.4 censored at step 99 (about a third of seeds never reach); and the `rate:`
  regimes, decided as `success_rate` claims.
* `futility:` (a "not replicated" verdict when the effect is real): arm x gets a true shift of exactly the
  claim's effect of interest (EFFECT, two seed SDs) over the named null regime, and one superiority
  claim "x higher, effect of interest EFFECT" counts "not replicated" (its interval below the effect of
  interest before any look replicated it). Its nominal rate is alpha / 2 (one side of the interval).
* `non-inferiority:` (a claim against a bar): x is worse than y by exactly the margin (EFFECT), the null
  at the bar; one non-inferiority claim counts "replicated". Nominal alpha / 2 (lo > -margin).
* `one-sample:` (a claim about one condition against a constant): the arm's seeds have mean MU (normal;
  the bimodal law; skewed: MU + SD (Exp(1) - 1)), and two one-sample superiority claims against MU count
  "replicated" either way. Nominal alpha. With no seed labels to exchange, `test: randomization` guards them
  with the exact sign test over seeds instead (level.sign_guard).

Under `test: randomization` every decisive verdict is confirmed by the exact test of its own null (issue 58):
a "replicated" by the randomization test of "no difference" (or of the margin), a "not replicated" by the
randomization test of "the difference is the effect of interest" (claim_types' `refute_nulls`), each with
the floor and the spread guard; a one-sample verdict by the sign test (`_guarded`).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats

from ablate.rundir.atomic import write_text
from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.maths.level import SPREAD_MAX, floor_p, randomization_p, separated, spread_ratio
from ablate.stats.maths.sequential import nominal_levels
from ablate.stats.values.table import VALUE_COLUMNS
from ablate.studies.calibrate import render_block
from ablate.studies.rate_levels import look_table

MU, SD = 0.35, 0.01
EFFECT = 0.02  # the futility regimes' effect of interest and the non-inferiority regimes' margin: two seed SDs
# new regimes are appended: each regime's draws are keyed by its index, so a saved table's rows stay reproducible
REGIMES = ("sd ratio 1", "sd ratio 4", "sd ratio 12", "bimodal arm", "bimodal both", "zero-variance arm",
           "slope", "auc", "censored reach", "rate: bimodal arm", "rate: bimodal both",
           "futility: sd ratio 1", "futility: sd ratio 4", "futility: sd ratio 12", "futility: bimodal arm",
           "futility: zero-variance arm", "non-inferiority: sd ratio 1", "non-inferiority: sd ratio 4",
           "non-inferiority: sd ratio 12", "non-inferiority: bimodal arm", "non-inferiority: zero-variance arm",
           "one-sample: normal", "one-sample: bimodal", "one-sample: skewed")
THRESHOLD = MU - 0.01  # success: '>=' this, between the bimodal law's two modes
PLANS = {"3/6/12": (3, 6, 12), "5/10/20": (5, 10, 20)}
LEVELS = (0.001, 0.003, 0.008, 0.01, 0.025, 0.05)  # exploratory Bonferroni shares; confirmatory graphs' 0.01-0.05
TESTS = ("welch", "randomization")
STEPS = np.arange(100, dtype=np.float64)
VERDICTS = {"futility": "not replicated", "non-inferiority": "replicated", "one-sample": "replicated"}


def sweeps_for(alpha: float, rel: float = 0.3, z: float = 1.96) -> int:
    """Sweeps for the rate at the nominal level to be known to +-rel (normal approximation, 95%)."""
    return math.ceil((z / rel) ** 2 * (1 - alpha) / alpha)


def family(regime: str) -> str:
    """What a regime's table counts: false positive (two directional claims), futility, non-inferiority
    or one-sample (ablate.studies.calibrate_level's docstring)."""
    head = regime.partition(": ")[0]
    return head if head in VERDICTS else "false positive"


def nominal(regime: str, alpha: float) -> float:
    """The error rate the regime's verdict has at the claim's alpha: one side of the interval (alpha / 2)
    for the futility and non-inferiority regimes' one claim, alpha for two directional claims."""
    return alpha / 2 if family(regime) in ("futility", "non-inferiority") else alpha


def _bimodal(rng, shape) -> np.ndarray:
    recover = rng.random(shape) < 0.6
    return MU + np.where(recover, 0.04, -0.06) + rng.normal(0, 0.005, shape)


def _curves(rng, shape) -> np.ndarray:
    """Per-seed curves [*shape, steps]."""
    tau = 40.0 * np.exp(rng.normal(0, 0.5, shape))
    return 0.5 * (1 - np.exp(-STEPS / tau[..., None])) + rng.normal(0, 0.01, (*shape, STEPS.size))


def curve_summary(curves: np.ndarray, agg: str) -> np.ndarray:
    """values.curve_value's slope@50:99 / auc@0:99 and reach.restricted_reach's >= 0.4 censored at the last
    step, along the last axis of curves (steps 0..99)."""
    if agg == "slope":
        return (curves[..., 99] - curves[..., 50]) / 49.0
    if agg == "auc":
        return np.trapezoid(curves, STEPS, axis=-1) / 99.0
    hit = curves >= 0.4
    return np.where(hit.any(-1), hit.argmax(-1), 99).astype(np.float64)


def plant(regime: str, n: int, sweeps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): [sweeps, n] per-seed values of the two arms (a one-sample regime's y is unused)."""
    shape = (sweeps, n)
    fam, base = family(regime), regime.partition(": ")[2]
    if fam in ("futility", "non-inferiority"):  # the null regime, x shifted by the effect (futility) or -margin
        x, y = plant(base, n, sweeps, rng)
        return x + (EFFECT if fam == "futility" else -EFFECT), y
    if fam == "one-sample":
        x = {"normal": lambda: rng.normal(MU, SD, shape), "bimodal": lambda: _bimodal(rng, shape),
             "skewed": lambda: MU + SD * (rng.exponential(1.0, shape) - 1.0)}[base]()
        return x, np.full(shape, MU)
    if regime.startswith("sd ratio"):
        r = float(regime.split()[-1])
        return rng.normal(MU, SD * r, shape), rng.normal(MU, SD, shape)
    if regime == "bimodal arm":
        return _bimodal(rng, shape), rng.normal(MU, SD, shape)
    if regime == "rate: bimodal arm":  # the null of a rate claim: both arms' seeds succeed 60% of the time
        return _bimodal(rng, shape), rng.normal(THRESHOLD + SD * scipy.stats.norm.ppf(0.6), SD, shape)
    if regime in ("rate: bimodal both", "bimodal both"):
        return _bimodal(rng, shape), _bimodal(rng, shape)
    if regime == "zero-variance arm":
        return rng.normal(MU, SD, shape), np.full(shape, MU)
    agg = {"slope": "slope", "auc": "auc", "censored reach": "reach"}[regime]
    return curve_summary(_curves(rng, shape), agg), curve_summary(_curves(rng, shape), agg)


def kind_of(regime: str) -> str:
    """The claim type a regime's sweeps are decided as."""
    if regime.startswith("rate: "):
        return "success_rate"
    return "non_inferiority" if family(regime) == "non-inferiority" else "superiority"


def claims_of(regime: str) -> list[dict]:
    """The regime's claims, as the `study.claims` entries `declared` parses: two directional ones (either
    replicating is a false positive), or the futility / non-inferiority regime's one claim."""
    fam, kind = family(regime), kind_of(regime)
    base = {"id": "c", "claim": "x beats y", "metric": "pass@1", "condition": "x", "baseline": "y", "type": kind}
    if fam == "futility":
        return [{**base, "direction": "higher", "effect": EFFECT}]
    if fam == "non-inferiority":
        return [{**base, "direction": "higher", "margin": EFFECT}]
    if fam == "one-sample":
        base = {**base, "baseline": None, "against": MU}
    out = [{**base, "direction": d, "effect": 1e-12} for d in ("higher", "lower")]
    if kind == "success_rate":
        out = [{**c, "success": f">={THRESHOLD}"} for c in out]
    return out


def declared(claim: dict, alpha: float, looks, test: str):
    """The one-claim study the engine decides a planted sweep with."""
    problems: list[str] = []
    out = parse_declared({"alpha": alpha, "test": test, "plan": {"looks": list(looks), "spending": "pocock"},
                          "claims": [claim]}, problems)
    assert not problems, problems
    return out


def _interval(x: np.ndarray, y: np.ndarray | None, a: float) -> tuple[np.ndarray, np.ndarray]:
    """verdicts.welch's interval of mean x - mean y (y None: mean x - MU, the one-sample t) at the look's
    confidence, along the last axis: scipy's, vectorised; no seed spread at all: the point."""
    confidence = 1.0 - a if a > 0 else 1.0 - 1e-12
    with np.errstate(all="ignore"):
        if y is None:
            ci = scipy.stats.ttest_1samp(x, MU, axis=-1).confidence_interval(confidence)
            lo, hi, d, flat = ci.low - MU, ci.high - MU, x.mean(-1) - MU, np.ptp(x, -1) == 0
        else:
            ci = scipy.stats.ttest_ind(x, y, axis=-1, equal_var=False).confidence_interval(confidence)
            lo, hi, d, flat = ci.low, ci.high, x.mean(-1) - y.mean(-1), np.ptp(x, -1) + np.ptp(y, -1) == 0
    return np.where(flat, d, lo), np.where(flat, d, hi)


def _decide(claim: dict, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(replicated, not replicated) per sweep: claim_types' rule (superiority, non-inferiority) on the interval."""
    s = 1 if claim["direction"] == "higher" else -1
    lo, hi = (lo, hi) if s > 0 else (-hi, -lo)
    if claim["type"] == "non_inferiority":
        return lo > -claim["margin"], hi < -claim["margin"]
    return (lo > 0) & (hi >= claim["effect"]), hi < claim["effect"]


def plan_rejections(x: np.ndarray, y: np.ndarray, looks, alpha: float, test: str = "welch",
                    spending: str = "pocock", memo: dict | None = None, regime: str = "sd ratio 1") -> np.ndarray:
    """[sweeps] bool: the regime's counted verdict (`VERDICTS`; "replicated" for false positives) at the
    look that decided some claim of the regime (x, y: [sweeps, N]).

    The engine's rule per claim: at each look (the first n seeds of each arm) Welch's interval at the look's
    nominal level a, read by the claim type's rule (`_decide`); under `randomization` a 'replicated' or 'not
    replicated' of a two-sample claim stands only where the randomization test of that verdict's null agrees
    at a / 2, never where its floor exceeds a / 2, and where the arms' seed SDs differ over SPREAD_MAX-fold
    only when the seeds are fully separated on that side (the claim then stays open); a one-sample one only
    where the exact sign test agrees (`_guarded`); the first decisive look stops the claim. `memo` keeps
    randomization p-values across calls on the same x, y (one per sweep, look and claim). A success_rate
    claim reads each look's counts of seeds meeting THRESHOLD (`_rate_verdicts`).
    """
    memo = {} if memo is None else memo
    levels = nominal_levels([n / looks[-1] for n in looks], alpha, spending)
    one_sample, kind, want = family(regime) == "one-sample", kind_of(regime), VERDICTS.get(family(regime), "replicated")
    out = np.zeros(x.shape[0], dtype=bool)
    if kind == "success_rate":
        kx, ky = (np.cumsum(v >= THRESHOLD, axis=1) for v in (x, y))
    intervals = [] if kind == "success_rate" else [
        _interval(x[:, :n], None if one_sample else y[:, :n], a) for n, a in zip(looks, levels)]
    for c, claim in enumerate(claims_of(regime)):
        alive = np.ones(x.shape[0], dtype=bool)
        for i_look, (n, a) in enumerate(zip(looks, levels)):
            if kind == "success_rate":
                s = 1 if claim["direction"] == "higher" else -1
                v = _rate_verdicts(s, n, a, looks, alpha)[kx[:, n - 1], ky[:, n - 1]]
                mine, other = alive & (v == 1), alive & (v == -1)
            else:
                rep, nrep = _decide(claim, *intervals[i_look])
                mine, other = alive & rep, alive & nrep
                if test == "randomization":  # each verdict confirmed by the exact test of its own null
                    last = i_look == len(looks) - 1  # there the verdict not counted stops nothing: unguarded
                    arm_y = None if one_sample else y  # a one-sample regime plants a y it never reads
                    mine, other = (sel if last and verdict != want else _guarded(sel, x, arm_y, n, a, null, (c, n, side), memo)
                                   for side, (sel, null, verdict) in enumerate(
                                       zip((mine, other), _nulls(claim), ("replicated", "not replicated"))))
            out |= mine if want == "replicated" else other
            alive &= ~(mine | other)
    return out


def _nulls(claim: dict) -> tuple[tuple[int, float], tuple[int, float]]:
    """The (direction, delta) of `randomization_p` / the sign test that 'replicated' and 'not replicated'
    reject (claim_types' `replicate_nulls` / `refute_nulls` of superiority and non-inferiority)."""
    s = 1 if claim["direction"] == "higher" else -1
    if claim["type"] == "non_inferiority":
        return (s, -claim["margin"]), (-s, claim["margin"])
    return (s, 0.0), (-s, -claim["effect"])


def _guarded(mine: np.ndarray, x, y, n: int, a: float, null: tuple[int, float], key, memo: dict) -> np.ndarray:
    """The randomization guard (level.guard) on the sweeps whose verdict tests `null` at this look; one-sample
    (y None): the exact sign guard (level.sign_guard)."""
    d, delta = null
    if y is None:
        if 0.5 ** n > a / 2:
            return np.zeros_like(mine)
        k = np.sum(d * (x[:, :n] - (MU + d * delta)) > 0, axis=-1)
        return mine & (scipy.stats.binom.sf(k - 1, n, 0.5) <= a / 2)
    if floor_p(n, n) > a / 2:
        return np.zeros_like(mine)
    xs, ys = x[:, :n] - d * delta, y[:, :n]  # the values the exact test reads
    mine = mine & ((spread_ratio(xs, ys) <= SPREAD_MAX) | separated(xs, ys, d))
    for i in np.flatnonzero(mine):
        if (i, *key) not in memo:
            memo[i, *key] = randomization_p(x[i, :n], y[i, :n], d, delta)
        mine[i] = memo[i, *key] <= a / 2
    return mine


@functools.lru_cache(maxsize=None)
def _rate_verdicts(s: int, n: int, a: float, looks: tuple, alpha: float) -> np.ndarray:
    """[n+1, n+1] int8: the engine's verdict at a look of n vs n seeds with k and j successes
    (`rate_levels.look_table`) of the bimodal regime's claim in direction s."""
    direction = "higher" if s > 0 else "lower"
    claim = declared(next(c for c in claims_of("rate: bimodal arm") if c["direction"] == direction),
                     alpha, looks, "welch").claims[0]
    return look_table(claim, n, a)


def entry_rejections(x: np.ndarray, y: np.ndarray, looks, alpha: float, test: str,
                     regime: str = "sd ratio 1") -> np.ndarray:
    """The same decision through `engine.evaluate`, one sweep at a time, from a values table with one
    batch per look and one one-claim study per claim of the regime at the claim's alpha."""
    batch = [next(k for k, n in enumerate(looks) if j < n) for j in range(looks[-1])]
    studies = [declared(c, alpha, looks, test) for c in claims_of(regime)]
    want = VERDICTS.get(family(regime), "replicated")
    out = np.zeros(x.shape[0], dtype=bool)
    for i in range(x.shape[0]):
        rows = [(f"{arm}{j}", batch[j], arm, j, "no_tool", "pass@1", float(v[i, j]))
                for arm, v in (("x", x), ("y", y)) for j in range(looks[-1])]
        table = pd.DataFrame(rows, columns=VALUE_COLUMNS)
        out[i] = any(evaluate(d, table).table["verdict"].iloc[0] == want for d in studies)
    return out


def run_cell(regime: str, plan: str, sweeps: int, seed: int = 0, entry: int = 0, chunk: int = 4000,
             levels=LEVELS) -> list[dict]:
    """Every level and test on the same planted sweeps of one (regime, plan); a level reads the first
    sweeps_for(its nominal rate) of them (at most `sweeps`), which is what knowing its rate to +-30% needs."""
    looks = PLANS[plan]
    counts = {a: min(sweeps, sweeps_for(nominal(regime, a))) for a in levels}
    rng = np.random.default_rng([seed, REGIMES.index(regime), looks[-1]])
    hits = {(a, t): 0 for a in levels for t in TESTS}
    mismatches = {(a, t): 0 for a in levels for t in TESTS}
    done = 0
    while done < sweeps:
        x, y = plant(regime, looks[-1], chunk, rng)  # whole chunks: a run's first N sweeps are any longer run's
        x, y = x[: sweeps - done], y[: sweeps - done]
        memo: dict = {}
        for a in levels:
            if done >= counts[a]:
                continue
            k_a = min(x.shape[0], counts[a] - done)
            for t in TESTS:
                rej = plan_rejections(x[:k_a], y[:k_a], looks, a, t, memo=memo, regime=regime)
                hits[a, t] += int(rej.sum())
                if done == 0 and entry:
                    k = min(entry, k_a)
                    mismatches[a, t] += int((entry_rejections(x[:k], y[:k], looks, a, t, regime) != rej[:k]).sum())
        done += x.shape[0]
    rows = []
    for (a, t), k in hits.items():
        n_a, rate = counts[a], nominal(regime, a)
        ci = scipy.stats.binomtest(k, n_a).proportion_ci(0.95, method="exact")
        first = nominal_levels([looks[0] / looks[-1]] + [n / looks[-1] for n in looks[1:]], a, "pocock")[0]
        # a success_rate claim's exact test has the randomization floor whatever the study's test; a
        # one-sample claim has no exact test to refuse it
        exact = (t == "randomization" or kind_of(regime) == "success_rate") and family(regime) != "one-sample"
        refused = exact and floor_p(looks[0], looks[0]) > first / 2
        rows.append({"regime": regime, "plan": plan, "alpha": a, "test": t, "sweeps": n_a, "rejections": k,
                     "rate": k / n_a, "ratio": k / n_a / rate, "ratio_low": ci.low / rate, "ratio_high": ci.high / rate,
                     "refused": refused, "entry_checked": min(entry, n_a), "entry_mismatches": mismatches[a, t]})
    return rows


def markdown(table: pd.DataFrame) -> str:
    """docs/stats.md's level tables: per regime and plan, the measured rate of the verdict the regime
    counts over the plan as a multiple of its nominal rate (95% exact interval), Welch and the randomization
    guard: false positives first, then futility, non-inferiority and one-sample verdicts (`family`)."""
    fam = table["regime"].map(family)
    out = _grid(table[fam == "false positive"], False)
    rest = table[fam != "false positive"]
    return out if rest.empty else out + "\n" + _grid(rest, True)


def _grid(table: pd.DataFrame, counted: bool) -> str:
    levels = sorted(table["alpha"].unique())
    lo, hi = table.groupby("alpha")["sweeps"].min(), table.groupby("alpha")["sweeps"].max()
    n = {a: f"{int(lo[a]):,}" if lo[a] == hi[a] else f"{int(lo[a]):,}-{int(hi[a]):,}" for a in levels}
    cols = [f"{t}, α={a:g} ({n[a]} sweeps)" for t in ("Welch", "randomization") for a in levels]
    first = ["regime", "counts (nominal rate)", "plan"] if counted else ["regime", "plan"]
    lines = ["| " + " | ".join(first) + " | " + " | ".join(cols) + " |", "|" + "---|" * (len(first) + len(cols))]
    groups = list(table.groupby(["regime", "plan"], sort=False))
    if counted:  # futility, then non-inferiority, then one-sample; plans in order within each
        groups.sort(key=lambda kv: (list(VERDICTS).index(family(kv[0][0])), list(PLANS).index(kv[0][1])))
    for (regime, plan), g in groups:
        g = g.set_index(["test", "alpha"])
        cells = []
        for t in TESTS:
            for a in levels:
                if (t, a) not in g.index:
                    cells.append("–")
                    continue
                r = g.loc[(t, a)]
                mark = " ✗" if r["ratio"] > 1.2 else ""
                text = f"{r['ratio']:.2f}× [{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]{mark}"
                cells.append(f"refused ({text})" if r["refused"] else text)
        what = [f"{VERDICTS[family(regime)]} ({'α/2' if nominal(regime, 1.0) < 1 else 'α'})"] if counted else []
        lines.append(f"| {' | '.join([regime, *what, plan])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(paths, doc: Path | None) -> int:
    table = pd.concat([pd.read_csv(p, dtype={"plan": str}) for p in sorted(paths)], ignore_index=True)
    return render_block(markdown(table), doc, "calibration:level")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.calibrate_level", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    most = sweeps_for(min(LEVELS) / 2)
    p.add_argument("--sweeps", type=int, default=most,
                   help=f"planted sweeps per (regime, plan), at most (default {most}: the rate at a nominal "
                        f"{min(LEVELS) / 2:g} known to +-30%%; each regime and level reads what its rate needs)")
    p.add_argument("--regimes", default=",".join(REGIMES), help="comma list of: " + ", ".join(REGIMES))
    p.add_argument("--plans", default=",".join(PLANS), help="comma list of: " + ", ".join(PLANS))
    p.add_argument("--levels", default=",".join(map(str, LEVELS)),
                   help="comma list of claim alphas (a level reads the first sweeps_for(alpha) sweeps, drawn in "
                        "whole chunks, so a table can be extended level by level)")
    p.add_argument("--entry", type=int, default=0, metavar="K",
                   help="also decide the first K sweeps of each cell through engine.evaluate and count disagreements")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the table as CSV here")
    p.add_argument("--render", nargs="+", type=Path, metavar="CSV", help="render saved --out tables (into --doc)")
    p.add_argument("--doc", type=Path)
    args = p.parse_args(argv)
    if args.render:
        return render(args.render, args.doc)
    regimes, plans = args.regimes.split(","), args.plans.split(",")
    levels = tuple(float(a) for a in args.levels.split(","))
    bad = [r for r in regimes if r not in REGIMES] + [q for q in plans if q not in PLANS]
    if bad or args.sweeps < 1:
        p.error(f"unknown regime/plan {bad} (or --sweeps < 1)")
    rows = []
    for plan in plans:
        for regime in regimes:
            most = max(sweeps_for(nominal(regime, a)) for a in levels)
            cell = run_cell(regime, plan, min(args.sweeps, most), args.seed, args.entry, levels=levels)
            rows += cell
            print(f"{regime:<34} {plan:<8} " + "  ".join(
                f"{r['test'][:4]}@{r['alpha']:g} {r['ratio']:.2f}x{'R' if r['refused'] else ''}"
                f"{'!' + str(r['entry_mismatches']) if r['entry_mismatches'] else ''}" for r in cell), flush=True)
    if args.out:
        write_text(args.out, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
