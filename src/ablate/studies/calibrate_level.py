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

Every regime is a null: the claim (two directional superiority claims, i.e. a two-sided test at the
claim's alpha) is false, so every "replicated" is a false positive. Planted per seed (pass@1 scale,
mean 0.35, seed SD 0.01): unequal SDs (ratio 1, 4, 12; equal means); a bimodal arm (60% recover at
+0.04, 40% collapse at -0.06, within SD 0.005) against a normal arm of equal mean; both arms bimodal
(the same law); one arm with no seed variance; and three curve metrics of the same curve law in both
arms (value_t = 0.5 (1 - exp(-t / tau)) + N(0, 0.01), tau = 40 exp(N(0, 0.5)), steps 0..99): slope
@50:99, auc @0:99 and reach >= 0.4 censored at step 99 (about a third of seeds never reach).
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

from ablate.stats.maths.level import SPREAD_MAX, floor_p, randomization_p, spread_ratio
from ablate.stats.maths.sequential import nominal_levels

MU, SD = 0.35, 0.01
REGIMES = ("sd ratio 1", "sd ratio 4", "sd ratio 12", "bimodal arm", "bimodal both", "zero-variance arm",
           "slope", "auc", "censored reach", "rate: bimodal arm", "rate: bimodal both")
THRESHOLD = MU - 0.01  # success: '>=' this, between the bimodal law's two modes
PLANS = {"3/6/12": (3, 6, 12), "5/10/20": (5, 10, 20)}
LEVELS = (0.001, 0.003, 0.008, 0.01, 0.025, 0.05)  # exploratory Bonferroni shares; confirmatory graphs' 0.01-0.05
TESTS = ("welch", "randomization")
STEPS = np.arange(100, dtype=np.float64)


def sweeps_for(alpha: float, rel: float = 0.3, z: float = 1.96) -> int:
    """Sweeps for the rate at the nominal level to be known to +-rel (normal approximation, 95%)."""
    return math.ceil((z / rel) ** 2 * (1 - alpha) / alpha)


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
    """(x, y): [sweeps, n] per-seed values of the two arms under the regime's null."""
    shape = (sweeps, n)
    if regime.startswith("sd ratio"):
        r = float(regime.split()[-1])
        return rng.normal(MU, SD * r, shape), rng.normal(MU, SD, shape)
    if regime == "bimodal arm":
        return _bimodal(rng, shape), rng.normal(MU, SD, shape)
    if regime == "rate: bimodal arm":  # the null of a rate claim: both arms' seeds succeed 60% of the time
        return _bimodal(rng, shape), rng.normal(THRESHOLD + SD * scipy.stats.norm.ppf(0.6), SD, shape)
    if regime == "rate: bimodal both":
        return _bimodal(rng, shape), _bimodal(rng, shape)
    if regime == "bimodal both":
        return _bimodal(rng, shape), _bimodal(rng, shape)
    if regime == "zero-variance arm":
        return rng.normal(MU, SD, shape), np.full(shape, MU)
    agg = {"slope": "slope", "auc": "auc", "censored reach": "reach"}[regime]
    return curve_summary(_curves(rng, shape), agg), curve_summary(_curves(rng, shape), agg)


def welch_p(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(difference, two-sided Welch p) along the last axis: scipy's ttest_ind(equal_var=False), vectorised."""
    res = scipy.stats.ttest_ind(x, y, axis=-1, equal_var=False)
    return x.mean(-1) - y.mean(-1), np.asarray(res.pvalue, dtype=np.float64)


def kind_of(regime: str) -> str:
    """The claim type a regime's sweeps are decided as (a mean's superiority, or a success rate's)."""
    return "success_rate" if regime.startswith("rate: ") else "superiority"


def declared(kind: str, direction: str, alpha: float, looks, test: str):
    """The one-claim study the engine decides a planted sweep with (x beats y, effect ~0)."""
    from ablate.stats.claims.declared import parse_declared

    claim = {"id": "c", "claim": "x beats y", "metric": "pass@1", "condition": "x", "baseline": "y",
             "direction": direction, "effect": 1e-12, "type": kind}
    if kind == "success_rate":
        claim["success"] = f">={THRESHOLD}"
    problems: list[str] = []
    out = parse_declared({"alpha": alpha, "test": test, "plan": {"looks": list(looks), "spending": "pocock"},
                          "claims": [claim]}, problems)
    assert not problems, problems
    return out


def plan_rejections(x: np.ndarray, y: np.ndarray, looks, alpha: float, test: str = "welch",
                    spending: str = "pocock", memo: dict | None = None, kind: str = "superiority") -> np.ndarray:
    """[sweeps] bool: either directional claim replicated at some look of the plan (x, y: [sweeps, N]).

    The engine's rule per claim of direction s: at each look (the first n seeds of each arm) Welch's
    interval at the look's nominal level a; significant in s: replicated (under `randomization`, only
    when the arms' seed SDs differ at most SPREAD_MAX-fold and the randomization test agrees at a / 2,
    never where its floor exceeds a / 2: the claim then stays open); significant against s: not replicated; the first decisive look stops the claim.
    `memo` keeps randomization p-values across calls on the same x, y (one per sweep, look and side).
    A success_rate claim reads each look's counts of seeds meeting THRESHOLD (`_rate_verdicts`).
    """
    memo = {} if memo is None else memo
    levels = nominal_levels([n / looks[-1] for n in looks], alpha, spending)
    out = np.zeros(x.shape[0], dtype=bool)
    if kind == "success_rate":
        kx, ky = (np.cumsum(v >= THRESHOLD, axis=1) for v in (x, y))
    stats = [welch_p(x[:, :n], y[:, :n]) for n in looks] if kind != "success_rate" else []
    for s in (1, -1):
        alive = np.ones(x.shape[0], dtype=bool)
        for i_look, (n, a) in enumerate(zip(looks, levels)):
            if kind == "success_rate":
                v = _rate_verdicts(s, n, a, looks, alpha)[kx[:, n - 1], ky[:, n - 1]]
                mine, other = alive & (v == 1), alive & (v == -1)
            else:
                d, p = stats[i_look]
                sig = alive & (p < a)
                mine, other = sig & (s * d > 0), sig & (s * d < 0)
                if test == "randomization":
                    mine = _randomization(mine, x, y, n, a, s, memo)
            out |= mine
            alive &= ~(mine | other)
    return out


def _randomization(mine: np.ndarray, x, y, n: int, a: float, s: int, memo: dict) -> np.ndarray:
    """The randomization guard on the sweeps Welch replicates at this look."""
    if floor_p(n, n) > a / 2:
        return np.zeros_like(mine)
    mine = mine & (spread_ratio(x[:, :n], y[:, :n]) <= SPREAD_MAX)
    for i in np.flatnonzero(mine):
        if (i, n, s) not in memo:
            memo[i, n, s] = randomization_p(x[i, :n], y[i, :n], s)
        mine[i] = memo[i, n, s] <= a / 2
    return mine


@functools.lru_cache(maxsize=None)
def _rate_verdicts(s: int, n: int, a: float, looks: tuple, alpha: float) -> np.ndarray:
    """[n+1, n+1] int8: the engine's verdict at a look of n vs n seeds with k and j successes (1
    replicated, -1 not replicated, 0 open), from `engine.look_verdict` itself: a rate claim reads counts
    only, and its exact test is its own whatever the study's `test`."""
    from ablate.stats.claims.engine import look_verdict

    claim = declared("success_rate", "higher" if s > 0 else "lower", alpha, looks, "welch").claims[0]
    out = np.zeros((n + 1, n + 1), dtype=np.int8)
    for k in range(n + 1):
        for j in range(n + 1):
            xs, ys = (np.r_[np.ones(c), np.zeros(n - c)] for c in (k, j))
            v = look_verdict(claim, xs, ys, a)[1]
            out[k, j] = 1 if v == "replicated" else -1 if v == "not replicated" else 0
    return out


def entry_rejections(x: np.ndarray, y: np.ndarray, looks, alpha: float, test: str,
                     kind: str = "superiority") -> np.ndarray:
    """The same decision through `engine.evaluate`, one sweep at a time, from a values table with one
    batch per look and two one-claim studies (higher, lower) at the claim's alpha."""
    from ablate.stats.claims.engine import evaluate
    from ablate.stats.values.table import VALUE_COLUMNS

    batch = [next(k for k, n in enumerate(looks) if j < n) for j in range(looks[-1])]
    studies = [declared(kind, direction, alpha, looks, test) for direction in ("higher", "lower")]
    out = np.zeros(x.shape[0], dtype=bool)
    for i in range(x.shape[0]):
        rows = [(f"{arm}{j}", batch[j], arm, j, "no_tool", "pass@1", float(v[i, j]))
                for arm, v in (("x", x), ("y", y)) for j in range(looks[-1])]
        table = pd.DataFrame(rows, columns=VALUE_COLUMNS)
        out[i] = any(evaluate(d, table).table["verdict"].iloc[0] == "replicated" for d in studies)
    return out


def run_cell(regime: str, plan: str, sweeps: int, seed: int = 0, entry: int = 0, chunk: int = 4000,
             levels=LEVELS) -> list[dict]:
    """Every level and test on the same planted sweeps of one (regime, plan); a level reads the first
    sweeps_for(level) of them (at most `sweeps`), which is what knowing its rate to +-30% needs."""
    looks = PLANS[plan]
    counts = {a: min(sweeps, sweeps_for(a)) for a in levels}
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
                rej = plan_rejections(x[:k_a], y[:k_a], looks, a, t, memo=memo, kind=kind_of(regime))
                hits[a, t] += int(rej.sum())
                if done == 0 and entry:
                    k = min(entry, k_a)
                    mismatches[a, t] += int((entry_rejections(x[:k], y[:k], looks, a, t, kind_of(regime))
                                             != rej[:k]).sum())
        done += x.shape[0]
    rows = []
    for (a, t), k in hits.items():
        n_a = counts[a]
        ci = scipy.stats.binomtest(k, n_a).proportion_ci(0.95, method="exact")
        first = nominal_levels([looks[0] / looks[-1]] + [n / looks[-1] for n in looks[1:]], a, "pocock")[0]
        # a success_rate claim's exact test has the randomization floor whatever the study's test
        exact = t == "randomization" or kind_of(regime) == "success_rate"
        refused = exact and floor_p(looks[0], looks[0]) > first / 2
        rows.append({"regime": regime, "plan": plan, "alpha": a, "test": t, "sweeps": n_a, "rejections": k,
                     "rate": k / n_a, "ratio": k / n_a / a, "ratio_low": ci.low / a, "ratio_high": ci.high / a,
                     "refused": refused, "entry_checked": min(entry, n_a), "entry_mismatches": mismatches[a, t]})
    return rows


def markdown(table: pd.DataFrame) -> str:
    """docs/stats.md's level table: per regime and plan, the measured false-positive rate over the plan
    as a multiple of the claim's alpha (95% exact interval), Welch and the randomization guard."""
    levels = sorted(table["alpha"].unique())
    n = table.groupby("alpha")["sweeps"].min()
    cols = [f"{t}, α={a:g} ({int(n[a]):,} sweeps)" for t in ("Welch", "randomization") for a in levels]
    lines = ["| regime | plan | " + " | ".join(cols) + " |", "|" + "---|" * (2 + len(cols))]
    for (regime, plan), g in table.groupby(["regime", "plan"], sort=False):
        g = g.set_index(["test", "alpha"])
        cells = []
        for t in TESTS:
            for a in levels:
                r = g.loc[(t, a)]
                mark = " ✗" if r["ratio"] > 1.2 else ""
                text = f"{r['ratio']:.2f}× [{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]{mark}"
                cells.append(f"refused ({text})" if r["refused"] else text)
        lines.append(f"| {regime} | {plan} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(paths, doc: Path | None) -> int:
    from ablate.studies.calibrate import render_block

    table = pd.concat([pd.read_csv(p, dtype={"plan": str}) for p in sorted(paths)], ignore_index=True)
    return render_block(markdown(table), doc, "calibration:level")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.calibrate_level", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=sweeps_for(min(LEVELS)),
                   help=f"planted sweeps per (regime, plan) (default {sweeps_for(min(LEVELS))}: the rate at "
                        f"alpha {min(LEVELS):g} known to +-30%%)")
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
            cell = run_cell(regime, plan, min(args.sweeps, max(map(sweeps_for, levels))), args.seed, args.entry,
                            levels=levels)
            rows += cell
            print(f"{regime:<18} {plan:<8} " + "  ".join(
                f"{r['test'][:4]}@{r['alpha']:g} {r['ratio']:.2f}x{'R' if r['refused'] else ''}"
                f"{'!' + str(r['entry_mismatches']) if r['entry_mismatches'] else ''}" for r in cell), flush=True)
    if args.out:
        from ablate.rundir.atomic import write_text

        write_text(args.out, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
