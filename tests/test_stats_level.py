"""The level where the studies decide (level.py, calibrate_level.py) and multiplicity by graphs
(multiplicity.py): the randomization test, its floor, the guard and the first-look refusal; Bretz
2009's procedure by hand; the harness's fast path is the engine's decision; a CI-sized calibration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.claims.study import check_study_block
from ablate.stats.maths.level import floor_p, guard, randomization_p, seeds_to_decide, spread_ratio
from ablate.stats.maths.multiplicity import gatekeeping, graphical_test, holm, update
from ablate.stats.values.table import VALUE_COLUMNS

# --------------------------------------------------------------------------------------------- randomization


def _welch_stat(a, b, axis):
    return (a.mean(axis) - b.mean(axis)) / np.sqrt(a.var(axis, ddof=1) / a.shape[axis] + b.var(axis, ddof=1) / b.shape[axis])


def test_randomization_p_is_scipys_exact_permutation_test_and_its_floor_is_one_over_the_relabellings():
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.30, 0.01, 5), rng.normal(0.31, 0.02, 5)
    want = scipy.stats.permutation_test((x, y), _welch_stat, alternative="greater", n_resamples=10**6,
                                        permutation_type="independent").pvalue
    assert randomization_p(x, y, +1) == pytest.approx(want, abs=1e-12)
    assert randomization_p(x + 1, y, +1) == pytest.approx(1 / 252) == pytest.approx(floor_p(5, 5))
    assert floor_p(3, 3) == 1 / 20 and seeds_to_decide(0.0015) == 6 and seeds_to_decide(0.05) == 3
    # a margin shifts x: H0 diff <= -0.5 is rejected for x - y = +1 as firmly as diff <= 0 is
    assert randomization_p(x + 1, y, +1, delta=-0.5) == pytest.approx(1 / 252)
    assert randomization_p(np.full(5, 0.4), np.full(5, 0.3), +1) == pytest.approx(1 / 252)  # no spread at all


def test_the_guard_makes_a_look_that_cannot_reach_its_level_undecidable_and_keeps_one_that_can():
    rng = np.random.default_rng(2)
    superiority = lambda x, y: lambda: randomization_p(x, y, +1, 0.0)  # noqa: E731
    x, y = rng.normal(0.40, 0.01, 5), rng.normal(0.30, 0.01, 5)
    v, why = guard("replicated", "excl 0", x, y, 0.003, superiority(x, y))
    assert v == "inconclusive" and "undecidable at 5 vs 5" in why and "1/252" in why and "needs 6" in why
    x, y = rng.normal(0.40, 0.01, 10), rng.normal(0.30, 0.01, 10)
    assert guard("replicated", "excl 0", x, y, 0.003, superiority(x, y))[0] == "replicated"
    wide = 0.40 + 0.05 * np.linspace(-1.5, 1.5, 10)  # seed SD ~0.046 against ~0.01
    v, why = guard("replicated", "excl 0", wide, y, 0.003, superiority(wide, y))
    assert v == "inconclusive" and "SDs differ" in why and spread_ratio(wide, y) > 3
    assert guard("inconclusive", "w", x, y, 0.003, superiority(x, y)) == ("inconclusive", "w")  # nothing to confirm
    v, why = guard("replicated", "excl 0", x, y, 0.003, lambda: 0.01)  # the type's exact test disagrees
    assert v == "inconclusive" and "does not" in why


def _block(n_claims: int, **extra) -> dict:
    claims = [{"id": f"c{i}", "claim": "x beats y", "metric": "pass@1", "condition": "x", "baseline": "y", "effect": 0.01,
               **({"role": "primary"} if i == 0 else {"role": "secondary"})} for i in range(n_claims)]
    return {"plan": {"looks": [5, 10, 20], "spending": "pocock"}, "claims": claims, **extra}


def test_a_plan_whose_first_look_cannot_decide_is_refused_at_declaration_with_the_seeds_it_needs():
    assert check_study_block(_block(6, test="welch")) == []  # Welch alone can decide at 5 vs 5
    problems = check_study_block(_block(6, test="randomization"))
    assert len(problems) == 6 and "first look (5 vs 5 seeds)" in problems[0] and "1/252" in problems[0]
    assert ">= 6 seeds per arm" in problems[0]  # alpha 0.05/6 at t = 6/20: one-sided 0.00173 >= 1/924
    assert "declares no `test`" not in problems[0]
    default = check_study_block(_block(6))  # randomization is the default, and the refusal says so
    assert [p.split(" (the study declares")[0] for p in default] == problems
    assert "declares no `test`" in default[0] and "`study.test: welch`" in default[0]
    # gatekeeping gives the primary the whole alpha: its first look decides; the secondaries start at 0
    assert check_study_block(_block(6, test="randomization", multiplicity="gatekeeping")) == []
    assert "test must be one of" in check_study_block(_block(1, test="bootstrap"))[0]
    assert "role must be one of" in check_study_block({"claims": [{**_block(1)["claims"][0], "role": "main"}]})[0]


# --------------------------------------------------------------------------------------------- graphs


def test_bretz_2009_graph_by_hand():
    """Two doses (H1, H2 primary) and their secondary endpoints (H3, H4): w = (1/2, 1/2, 0, 0),
    H1 -> H2, H3 by 1/2 each; H2 -> H1, H4 by 1/2; H3 -> H2; H4 -> H1. p = (0.01, 0.005, 0.015, 0.022),
    alpha 0.025. By hand: H2 (0.005 <= 0.0125) falls; w = (3/4, 0, 0, 1/4), g13 = (1/2)/(1 - 1/4) = 2/3,
    g14 = 1/3, g31 = g34 = 1/2, g41 = 1. H1 (0.01 <= 0.01875) falls; w3 = w4 = 1/2 (0.0125 each):
    H3 (0.015) and H4 (0.022) stand. With p3 = 0.012 instead H3 falls and passes its 1/2 to H4
    (g34 = 1): H4 at 0.025 falls too."""
    w = np.array([0.5, 0.5, 0, 0])
    g = np.array([[0, 0.5, 0.5, 0], [0.5, 0, 0, 0.5], [0, 1, 0, 0], [1, 0, 0, 0.0]])
    w2, g2 = update(w, g, 1)
    assert w2 == pytest.approx([0.75, 0, 0, 0.25])
    assert g2[0, 2] == pytest.approx(2 / 3) and g2[0, 3] == pytest.approx(1 / 3) and g2[3, 0] == pytest.approx(1)
    assert g2[2, 0] == pytest.approx(0.5) and g2[2, 3] == pytest.approx(0.5)
    assert list(graphical_test([0.01, 0.005, 0.015, 0.022], w, g, 0.025)) == [True, True, False, False]
    assert list(graphical_test([0.01, 0.005, 0.012, 0.022], w, g, 0.025)) == [True, True, True, True]


def test_holm_and_gatekeeping_are_graphs():
    # Holm by hand: 0.01 <= 0.05/3, then 0.02 <= 0.05/2, then 0.07 > 0.05
    assert list(graphical_test([0.01, 0.07, 0.02], *holm(3), 0.05)) == [True, False, True]
    w, g = gatekeeping([True, True, False, False])
    assert list(w) == [0.5, 0.5, 0, 0]
    # both primaries fall: the secondaries get all of alpha (Holm between them: 0.025, then 0.05)
    assert list(graphical_test([0.02, 0.01, 0.04, 0.02], w, g, 0.05)) == [True, True, True, True]
    # one primary stands: nothing reaches the secondaries however small their p
    assert list(graphical_test([0.2, 0.01, 1e-6, 1e-6], w, g, 0.05)) == [False, True, False, False]


def _table(arms: dict[str, np.ndarray]) -> pd.DataFrame:
    rows = [(f"{c}{j}", 0, c, j, "no_tool", "pass@1", float(v)) for c, vals in arms.items() for j, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def test_gatekeeping_passes_the_primarys_alpha_to_the_secondary_and_the_default_stays_bonferroni():
    rng = np.random.default_rng(4)
    table = _table({"base": rng.normal(0.30, 0.01, 5), "a": rng.normal(0.36, 0.01, 5),
                    "b": 0.30 + 0.5 * (rng.normal(0.36, 0.01, 5) - 0.30)})
    claims = [{"id": "primary", "claim": "a", "metric": "pass@1", "condition": "a", "baseline": "base",
               "effect": 0.01, "role": "primary"},
              {"id": "secondary", "claim": "b", "metric": "pass@1", "condition": "b", "baseline": "base",
               "effect": 0.01, "role": "secondary"}] + [
              {"id": f"other{i}", "claim": "o", "metric": "pass@1", "condition": "base", "baseline": "a",
               "effect": 0.01, "role": "secondary"} for i in range(4)]
    plan = {"looks": [5], "spending": "pocock"}
    bonf = evaluate(parse_declared({"claims": claims, "plan": plan}, []), table).table.set_index("id")
    gate = evaluate(parse_declared({"claims": claims, "plan": plan, "multiplicity": "gatekeeping"}, []),
                    table).table.set_index("id")
    assert bonf.loc["primary", "alpha_nominal"] == pytest.approx(0.05 / 6)
    assert gate.loc["primary", "alpha_nominal"] == pytest.approx(0.05) and gate.loc["primary", "verdict"] == "replicated"
    assert gate.loc["secondary", "alpha_nominal"] > bonf.loc["secondary", "alpha_nominal"]
    assert "gatekeeping: alpha" in gate.loc["secondary", "reason"]
    # without the primary's replication nothing passes on
    worse = table.copy()
    worse.loc[worse["condition"] == "a", "value"] -= 0.06
    stopped = evaluate(parse_declared({"claims": claims, "plan": plan, "multiplicity": "gatekeeping"}, []),
                       worse).table.set_index("id")
    assert stopped.loc["secondary", "verdict"] == "inconclusive"
    # the procedure is the reason, not the seed plan (which had alpha for this look)
    assert stopped.loc["secondary", "reason"].startswith("gatekeeping: no alpha passed to it")
    from ablate.stats.claims.engine import NO_ALPHA, _multiplicity_reason

    assert _multiplicity_reason(f"{NO_ALPHA} (no seed-to-seed variation)", "graph", 0.0) == \
        "no seed-to-seed variation; graph: no alpha passed to it (the claims before it were not replicated)"
    assert _multiplicity_reason("the interval excludes 0", "graph", 0.0125) == "the interval excludes 0; graph: alpha 0.0125"


# --------------------------------------------------------------------------------------------- harness


def test_the_harness_fast_path_is_the_engines_decision():
    """plan_rejections (vectorised) against engine.evaluate, sweep by sweep, in every regime (false positives,
    futility, non-inferiority, one-sample), for both tests; planted shifts of either sign in some sweeps make
    each verdict happen at every look, fully separated seeds with unequal spreads among them."""
    from ablate.studies.calibrate_level import REGIMES, VERDICTS, entry_rejections, family, plant, plan_rejections

    rng = np.random.default_rng(0)
    decided = {}
    for regime in REGIMES:
        x, y = plant(regime, 10, 12, rng)
        spread = np.std(np.concatenate([x, y], axis=1), axis=1, keepdims=True) + 0.01
        x[::3] += 3 * spread[::3]
        x[1::3] -= 3 * spread[1::3]
        for test in ("welch", "randomization"):
            fast = plan_rejections(x, y, (5, 10), 0.05, test, regime=regime)
            assert (fast == entry_rejections(x, y, (5, 10), 0.05, test, regime)).all(), (regime, test)
            decided[family(regime)] = decided.get(family(regime), 0) + int(fast.sum())
    assert set(decided) == {"false positive", *VERDICTS} and min(decided.values()) >= 4, decided


def test_the_planted_curve_summaries_are_the_reports():
    from ablate.stats.values.reach import restricted_reach
    from ablate.stats.values.table import curve_value
    from ablate.studies.calibrate_level import STEPS, _curves, curve_summary

    curves = _curves(np.random.default_rng(1), (6,))
    for row, slope, auc, reach in zip(curves, curve_summary(curves, "slope"), curve_summary(curves, "auc"),
                                      curve_summary(curves, "reach")):
        frame = pd.DataFrame({"val/pass@1": row}, index=pd.Index(STEPS.astype(int), name="step"))
        assert slope == pytest.approx(curve_value(frame, "slope:val/pass@1@50:99"), rel=1e-12)
        assert auc == pytest.approx(curve_value(frame, "auc:val/pass@1@0:99"), rel=1e-12)
        assert reach == restricted_reach(frame, "val/pass@1", ">=", 0.4)


def test_calibration_at_the_studies_levels_ci_sized():
    """docs/stats.md's level table, small: the 5/10/20 plan in two regimes where the guard holds
    (3,000 null sweeps; at a true 1.0x the measured rate at alpha 0.008 exceeds 1.9x with probability
    < 0.001, at 0.05 (812 sweeps) 1.45x with probability < 0.01)."""
    from ablate.studies.calibrate_level import run_cell

    for regime in ("bimodal both", "sd ratio 12", "rate: bimodal arm"):
        rows = {(r["test"], r["alpha"]): r for r in run_cell(regime, "5/10/20", 3000, seed=7)}
        assert rows["randomization", 0.008]["ratio"] <= 1.9, regime
        assert rows["randomization", 0.05]["ratio"] <= 1.45, regime
    # a bimodal arm decided on its mean is the regime no test of means holds: the check above can fail
    rows = {(r["test"], r["alpha"]): r for r in run_cell("bimodal arm", "5/10/20", 3000, seed=7)}
    assert rows["welch", 0.008]["ratio"] > 1.9


def test_futility_and_one_sample_verdicts_at_the_studies_levels_ci_sized():
    """The new rows of the level table, small: "not replicated" when the effect of interest is true holds
    alpha / 2 (3/6/12; 1,665 sweeps at 0.05: at a true 1.0x the rate exceeds 1.45x with probability < 0.01);
    a one-sample claim holds alpha on normal seeds; on a bimodal arm only with the exact sign guard."""
    from ablate.studies.calibrate_level import nominal, run_cell

    assert nominal("futility: sd ratio 1", 0.05) == 0.025 and nominal("one-sample: normal", 0.05) == 0.05
    for regime, most in (("futility: sd ratio 1", 1.45), ("futility: zero-variance arm", 1.45),
                         ("one-sample: normal", 1.45)):
        rows = run_cell(regime, "3/6/12", 1665, seed=7, levels=(0.05,))
        assert all(r["ratio"] <= most for r in rows), (regime, rows)
    # a bimodal arm breaks the one-sample t's level; the exact sign guard brings it near nominal
    rows = {r["test"]: r for r in run_cell("one-sample: bimodal", "3/6/12", 812, seed=7, levels=(0.05,))}
    assert rows["welch"]["ratio"] > 3 and rows["randomization"]["ratio"] < 1.6 and not rows["randomization"]["refused"]
    # "not replicated" is guarded like "replicated": arms whose spreads differ 12-fold no longer stop as futile
    rows = {r["test"]: r for r in run_cell("futility: bimodal arm", "3/6/12", 1000, seed=7, levels=(0.01,))}
    assert rows["welch"]["ratio"] > 3 and rows["randomization"]["ratio"] < 1.5


def test_the_level_table_in_stats_md_is_rendered_from_the_saved_run():
    import re
    from pathlib import Path

    from ablate.studies.calibrate_level import markdown

    root = Path(__file__).resolve().parent.parent
    table = pd.concat([pd.read_csv(p, dtype={"plan": str}) for p in sorted((root / "docs" / "calibration" / "level")
                                                                          .glob("*.csv"))], ignore_index=True)
    doc = (root / "docs" / "stats.md").read_text()
    (have,) = re.findall(r"<!-- calibration:level -->\n(.*?)<!-- /calibration:level -->", doc, re.S)
    assert have == markdown(table), ("run: python -m ablate.studies.calibrate_level --render "
                                     "docs/calibration/level/*.csv --doc docs/stats.md")
    # the saved run is the one the docs describe: every regime and plan, each level at its +-30% count (the
    # futility regimes, whose randomization half is the costly one, at the levels 0.008-0.05 only)
    from ablate.studies.calibrate_level import LEVELS, PLANS, REGIMES, TESTS, family, nominal, sweeps_for

    for regime in REGIMES:
        levels = [a for a in LEVELS if a >= 0.008] if family(regime) == "futility" else LEVELS
        cells = table[table["regime"] == regime]
        assert len(cells) == len(PLANS) * len(levels) * len(TESTS), regime
        assert all(r.sweeps >= sweeps_for(nominal(regime, r.alpha)) for r in cells.itertuples()), regime
    assert table["entry_mismatches"].sum() == 0


def test_re_runs_share_the_claims_error_budget():
    rng = np.random.default_rng(5)
    table = _table({"base": rng.normal(0.30, 0.01, 5), "a": rng.normal(0.33, 0.01, 5)})
    claim = {"id": "c", "claim": "a", "metric": "pass@1", "condition": "a", "baseline": "base", "effect": 0.01}
    once = evaluate(parse_declared({"claims": [claim], "plan": {"looks": [5]}}, []), table).table.iloc[0]
    twice = evaluate(parse_declared({"claims": [claim], "plan": {"looks": [5]}, "realisations": 2}, []),
                     table).table.iloc[0]
    assert once["alpha_nominal"] == pytest.approx(0.05) and twice["alpha_nominal"] == pytest.approx(0.025)
    assert twice["ci_high"] - twice["ci_low"] > once["ci_high"] - once["ci_low"]
    assert "realisations must be" in check_study_block({"claims": [claim], "realisations": 0})[0]


def test_keeps_gain_and_bounded_claims_are_guarded_by_their_own_randomization_tests():
    """Under test: randomization a keeps_gain claim (non-inferiority at a share of the gain) and a bounded
    claim (two one-sided tests at its bounds) are decided, not refused by a missing test."""
    from ablate.stats.claims.declared import parse_declared
    from ablate.stats.claims.engine import evaluate
    from ablate.stats.values.table import VALUE_COLUMNS

    spread = np.array([-0.005, -0.003, -0.001, 0.001, 0.003, 0.005])
    arms = {"y": 0.30 + spread, "x": 0.40 + spread[::-1], "z": 0.40 + np.roll(spread, 2), "w": 0.325 + np.roll(spread, 3)}
    rows = [(f"{a}{j}", 0, a, j, "no_tool", "pass@1", float(v)) for a, vals in arms.items() for j, v in enumerate(vals)]
    problems: list[str] = []
    declared = parse_declared({"alpha": 0.05, "test": "randomization", "plan": {"looks": [6], "spending": "pocock"},
                               "claims": [
        {"id": "gain", "claim": "x beats y", "metric": "pass@1", "condition": "x", "baseline": "y", "effect": 0.05},
        {"id": "keeps", "claim": "z keeps most of the gain", "metric": "pass@1", "condition": "z", "baseline": "x",
         "type": "keeps_gain", "requires": "gain", "margin_share": 0.5},
        {"id": "small", "claim": "w adds little over y", "metric": "pass@1", "condition": "w", "baseline": "y",
         "type": "bounded", "bounds": [0.0, 0.05]}]}, problems)
    assert not problems, problems
    table = evaluate(declared, pd.DataFrame(rows, columns=VALUE_COLUMNS)).table.set_index("id")
    for claim in ("gain", "keeps", "small"):
        assert table.loc[claim, "verdict"] == "replicated", (claim, table.loc[claim, "reason"])
        assert "randomization test p" in table.loc[claim, "reason"], claim


def test_spread_settled_places_a_ratio_over_the_guard_only_when_its_f_bound_does():
    from ablate.stats.maths.level import SPREAD_MAX, spread_settled

    z = np.array([-1.2, -0.4, 0.1, 0.5, 1.0, -0.3, 0.8, -0.9, 0.2, 0.0])
    z = (z - z.mean()) / z.std(ddof=1)
    # 14-fold at 10 vs 10 (003's fixed_tool_collapses): F bound ~7-fold, over the guard
    low = spread_settled(14 * z, z[::-1])
    assert low is not None and SPREAD_MAX < low < 14
    assert spread_settled(8 * z[:5] / z[:5].std(ddof=1), z[5:] / z[5:].std(ddof=1)) is None  # 8-fold at 5 vs 5: could be noise
    assert spread_settled(2 * z, z) is None and spread_settled(z, z) is None
    assert spread_settled(z, np.zeros(10)) == np.inf  # one arm with no spread at all
    assert spread_settled(np.zeros(4), np.zeros(4)) is None and spread_settled(z[:1], z) is None
