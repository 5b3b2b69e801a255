"""Decisive data decided (issue 58): a rate with no events on any seed is bounded exactly (Clopper-Pearson),
fully separated seeds are not refused by the spread guard, and gates decide on an interval, not a point."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from ablate.metrics import prompt_ratios
from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.maths import level
from ablate.stats.maths.verdicts import clopper_pearson, gate, no_events, rate_or_welch
from ablate.stats.render.claims import verdict_cell
from ablate.stats.values.table import VALUE_COLUMNS, rate_trials


def _table(arms: dict, metric: str = "pass@1", trials: float | None = None) -> pd.DataFrame:
    rows = [{"run": f"{arm}{j}", "batch": 0, "condition": arm, "seed": j, "regime": "no_tool", "metric": metric,
             "value": float(v), **({} if trials is None else {"trials": trials})}
            for arm, vals in arms.items() for j, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=VALUE_COLUMNS + ([] if trials is None else ["trials"]))


def _decide(claim: dict, table: pd.DataFrame, **study) -> pd.Series:
    problems: list[str] = []
    base = {"id": "c", "claim": "c", "metric": "pass@1", "condition": "x", "baseline": "y"}
    declared = parse_declared({"plan": {"looks": [5], "spending": "pocock"}, **study,
                               "claims": [{**base, **claim}]}, problems)
    assert not problems, problems
    return evaluate(declared, table).table.iloc[0]


# --------------------------------------------------------------------------------------------- rates, no events


def test_clopper_pearson_known_values():
    # 0 of n: the upper bound solves (1 - p)^n = (1 - c) / 2, closed form; issue 58's 0 of 40,000 at 95%
    lo, hi = clopper_pearson(0, 40_000, 0.95)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 40_000), rel=1e-9) and hi == pytest.approx(9.222e-5, rel=1e-3)
    assert clopper_pearson(40_000, 40_000, 0.95) == pytest.approx((1 - hi, 1.0))
    # 3 of 10 (the textbook's [0.0667, 0.6525]) and the beta quantiles it is defined by
    lo, hi = clopper_pearson(3, 10, 0.95)
    assert (lo, hi) == pytest.approx((0.0667, 0.6525), abs=1e-4)
    assert (lo, hi) == pytest.approx((scipy.stats.beta.ppf(0.025, 3, 8), scipy.stats.beta.ppf(0.975, 4, 7)))


def test_no_events_pools_the_fewest_trials_and_needs_every_seed_to_agree():
    assert no_events([0, 0, 0], [8000, 8000, 7000]) == (0, 21_000)  # seeds x the fewest trials (AM-GM bound)
    assert no_events([1.0, 1.0], [500, 500]) == (1000, 1000)  # only events: the complement has none
    assert no_events([0, 0.001], [8000, 8000]) is None and no_events([0, 0], None) is None
    assert no_events([0, 0], [8000, math.nan]) is None and no_events([0, 0], [8000]) is None


def test_a_rate_with_no_events_gets_its_exact_bound_and_is_decided():
    """004's substitution_common: no substitution error on any of 5 seeds x 8,000 samples against the
    paper's 0.1. Welch's t gives the point [0, 0] ('no seed-to-seed variation'); the exact bound of 0 in
    40,000 excludes the effect of interest: not replicated."""
    zeros = [0.0] * 5
    claim = {"metric": "verdict_rate/substitution_error", "baseline": None, "direction": "higher", "effect": 0.1}
    row = _decide(claim, _table({"x": zeros}, "verdict_rate/substitution_error", trials=8000), test="welch")
    assert row["verdict"] == "not replicated" and row["ci_low"] == 0.0
    assert row["ci_high"] == pytest.approx(clopper_pearson(0, 40_000, 0.95)[1])
    assert "0 of 40,000 trials on every seed: exact (Clopper-Pearson) interval" in row["reason"]
    # under the default exact guard the seed is the unit: 5 seeds cannot reach the one-sided 0.025 by the
    # sign test (1/32), whatever the pooled trials say (a 10% rate could sit on one seed in ten); 6 can
    row = _decide(claim, _table({"x": zeros}, "verdict_rate/substitution_error", trials=8000))
    assert row["verdict"] == "inconclusive" and row["ci_high"] == pytest.approx(clopper_pearson(0, 40_000, 0.95)[1])
    assert "undecidable at 5 seeds: the exact sign test's smallest p 1/32" in row["reason"] and "needs 6" in row["reason"]
    six = _decide(claim, _table({"x": [0.0] * 6}, "verdict_rate/substitution_error", trials=8000),
                  plan={"looks": [6], "spending": "pocock"})
    assert six["verdict"] == "not replicated" and "sign test p 0.016 <= 0.025" in six["reason"]
    # without the counts (a table from a tool that has none) the point stays, and so does its note
    old = _decide(claim, _table({"x": zeros}, "verdict_rate/substitution_error"))
    assert (old["ci_low"], old["ci_high"]) == (0.0, 0.0) and "no seed-to-seed variation" in old["reason"]


def test_two_arms_without_events_bound_the_difference_by_both_exact_intervals():
    est = rate_or_welch([0.0] * 5, [0.0] * 5, 0.95, trials=([8000] * 5, [8000] * 5))
    half = clopper_pearson(0, 40_000, 0.975)[1]  # each arm at 1 - 0.05 / 2 (Bonferroni over the arms)
    assert (est.low, est.high) == pytest.approx((-half, half)) and est.p_value == 1.0
    # one arm has no events, the other varies: its own t-interval at 0.975, against the exact bound
    y = np.array([0.01, 0.02, 0.015, 0.012, 0.018])
    est = rate_or_welch([0.0] * 5, y, 0.95, trials=([8000] * 5, [8000] * 5))
    t = scipy.stats.ttest_1samp(y, 0).confidence_interval(0.975)
    assert (est.low, est.high) == pytest.approx((0.0 - t.high, half - t.low)) and math.isnan(est.p_value)
    # not a rate (no trials) or values that vary: Welch, as before
    assert rate_or_welch([0.0] * 5, y, 0.95) == rate_or_welch([0.0] * 5, y, 0.95, trials=(None, None))


def test_the_trials_rule_is_the_metric_tables_binomial_rates_over_the_whole_test_set():
    cols = {"n": np.array([4.0, 4.0]), "n_correct": np.array([1.0, 2.0]), "n_answered": np.array([3.0, 4.0]),
            "n_calc": np.array([1.0, 0.0]), "verdict/substitution_error": np.array([0.0, 1.0]),
            "mean_length": np.array([9.0, 8.0]), "tool_calls": np.array([1.0, 2.0])}
    for name, _, den, kind, _ in prompt_ratios(cols, [1, 2, 4]):
        den = np.broadcast_to(np.asarray(den, dtype=np.float64), (2,))
        counts = kind == "counts"
        over_samples = kind == "samples" or (counts and np.array_equal(den, cols["n"]))
        want = 8.0 if over_samples else 2.0 if counts and np.array_equal(den, np.ones(2)) else math.nan
        got = rate_trials(name, 2, 8)
        assert got == want or (math.isnan(got) and math.isnan(want)), name
    assert math.isnan(rate_trials("by_operands/3/pass@1", 2, 8)) and math.isnan(rate_trials("final:val/pass@1", 2, 8))


# --------------------------------------------------------------------------------------------- separated seeds


@pytest.mark.parametrize("direction", ["higher", "lower"])
def test_fully_separated_seeds_are_decided_whatever_their_spreads(direction):
    """003's fixed_tool_collapses: every `on` seed below every `off` seed, the `off` seeds spread over 8 times
    more. The spread guard used to refuse it; the randomization p (1/252 at 5 vs 5) is exact for 'the recipe
    changes nothing' and decides. Both directions: the claim's arm above, or below."""
    tight = np.array([0.002, 0.004, 0.003, 0.006, 0.005])
    wide = np.array([0.18, 0.22, 0.26, 0.24, 0.30])
    s = 1 if direction == "higher" else -1
    x, y = (wide, tight) if s > 0 else (tight, wide)
    assert level.spread_ratio(x, y) > level.SPREAD_MAX and level.separated(x, y, s) and not level.separated(x, y, -s)
    row = _decide({"direction": direction, "effect": 0.1}, _table({"x": x, "y": y}), test="randomization")
    assert row["verdict"] == "replicated", row["reason"]
    assert "randomization test p 0.004" in row["reason"] and "lies beyond every seed" in row["reason"]
    # one seed of the wide arm crosses to the other side: not separated, the guard refuses as before
    crossed = wide.copy()
    crossed[0] = 0.001
    x, y = (crossed, tight) if s > 0 else (tight, crossed)
    row = _decide({"direction": direction, "effect": 0.01}, _table({"x": x, "y": y}), test="randomization")
    assert row["verdict"] == "inconclusive" and "SDs differ" in row["reason"]


def test_the_guard_exemption_reads_the_values_the_exact_test_reads():
    wide, tight = np.array([0.18, 0.22, 0.26, 0.24, 0.30]), np.array([0.20, 0.201, 0.202, 0.203, 0.2005])
    # non-inferiority with margin 0.1: x + 0.1 lies above every y although x itself does not
    row = _decide({"type": "non_inferiority", "margin": 0.1}, _table({"x": wide, "y": tight}), test="randomization")
    assert not level.separated(wide, tight) and level.separated(wide + 0.1, tight)
    assert row["verdict"] == "replicated" and "lies beyond every seed" in row["reason"]
    # the guard itself: `apart` lets the exact test decide, the exact test still has its say
    v, why = level.guard("replicated", "r", wide + 1, tight, 0.05, lambda: 0.5, apart=True)
    assert v == "inconclusive" and "does not" in why
    assert level.guard("replicated", "r", wide + 1, tight, 0.05, lambda: 0.001, apart=False)[0] == "inconclusive"
    # more seeds can decide separated arms: no spread stop for them
    from ablate.stats.claims.claim_types import CLAIM_TYPES

    claim = parse_declared({"claims": [{"id": "c", "claim": "c", "metric": "m", "condition": "x", "baseline": "y",
                                        "effect": 0.1}]}, []).claims[0]
    many_wide, many_tight = np.linspace(0.2, 0.4, 10), np.linspace(0.0, 0.01, 10)
    assert CLAIM_TYPES["superiority"].settled_spread(claim, many_wide, many_tight, "randomization") is None
    assert CLAIM_TYPES["superiority"].settled_spread(claim, many_wide - 0.2, many_tight, "randomization") > 3


# --------------------------------------------------------------------------------------------- gates


@pytest.mark.parametrize("op,held,failed", [(">=", 0.10, 0.50), ("<", 0.50, 0.10)])
def test_a_gate_holds_or_fails_only_when_its_interval_clears_the_threshold(op, held, failed):
    seeds = np.array([-0.01, 0.0, 0.01, 0.005, -0.005])
    t = scipy.stats.ttest_1samp(seeds + 0.3, 0).confidence_interval(0.95)
    g = gate(seeds + 0.3, op, held)
    assert g.status == "held" and (g.low, g.high) == pytest.approx((t.low, t.high)) and g.value == pytest.approx(0.3)
    assert gate(seeds + 0.3, op, failed).status == "failed"
    assert gate(seeds + 0.3, op, 0.3).status == "undetermined"  # the mean clears nothing its interval holds
    assert gate([0.3] * 4, op, 0.3 + (1e-9 if op == "<" else -1e-9)).status == "held"  # no spread: the point
    assert gate([0.3], op, held).status == "undetermined"  # one value, no interval
    assert gate([0.3], op, held, band=(0.28, 0.32)).status == "held"  # a condition mean's own band


def test_dapos_overlong_gate_is_undetermined_and_its_claim_not_testable():
    """issue 58: the mean penalty -0.000961 against < -0.001, seeds -0.00157 to -0.000445: the point says
    'failed', the interval holds the threshold."""
    penalty = [-0.00157, -0.00112, -0.00109, -0.00082, -0.00072, -0.000445]
    table = pd.concat([_table({"x": [0.35] * 3 + [0.36] * 3, "y": [0.34, 0.341, 0.339, 0.342, 0.338, 0.34]}),
                       _table({"x": penalty}, "mean:train/overlong_penalty_mean")], ignore_index=True)
    table.loc[table["metric"] != "pass@1", "regime"] = "train"
    pre = {"check": "the penalty reaches the rewards", "metric": "mean:train/overlong_penalty_mean", "op": "<",
           "threshold": -0.001}
    row = _decide({"effect": 0.03, "precondition": pre}, table)
    assert row["verdict"] == "not testable" and row["precondition_status"] == "undetermined"
    assert row["reason"].startswith("precondition undetermined: the penalty reaches the rewards: "
                                    "mean:train/overlong_penalty_mean of x = -0.000961 [-0.00")
    assert "(needs < -0.001)" in row["reason"]
    assert verdict_cell(row).startswith("**not testable**: precondition undetermined: the penalty")
    held = _decide({"effect": 0.03, "precondition": {**pre, "threshold": -0.0001}}, table)
    assert held["precondition_status"] == "held" and held["verdict"] != "not testable"


# --------------------------------------------------------------------------------------------- futility, one-sample


def test_a_not_replicated_verdict_needs_its_own_exact_test():
    """'not replicated' (the interval excludes the effect of interest) is confirmed by the randomization test
    of H0: difference >= effect, and refused where the arms' spreads differ over 3-fold without separation."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.300, 0.004, 10), rng.normal(0.300, 0.004, 10)
    claim = {"direction": "higher", "effect": 0.03}
    row = _decide(claim, _table({"x": x, "y": y}), plan={"looks": [10], "spending": "pocock"})
    assert row["verdict"] == "not replicated" and "randomization test p" in row["reason"]
    assert _decide(claim, _table({"x": x, "y": y}), plan={"looks": [10], "spending": "pocock"},
                   test="welch")["verdict"] == "not replicated"
    wide = 0.27 + 0.07 * np.r_[-1, 1].repeat(5)  # SD ~0.074 against ~0.004, seeds on both sides of y + 0.03
    row = _decide(claim, _table({"x": wide, "y": y}), plan={"looks": [10], "spending": "pocock"})
    assert row["verdict"] == "inconclusive" and "SDs differ" in row["reason"] and "Welch alone: not replicated" in row["reason"]
    # 3 vs 3 cannot reach the one-sided 0.025: undecidable, not futile
    row = _decide(claim, _table({"x": x[:3], "y": y[:3]}), plan={"looks": [3], "spending": "pocock"})
    assert row["verdict"] == "inconclusive" and "undecidable at 3 vs 3" in row["reason"]


def test_refute_nulls_read_the_side_the_interval_excluded():
    from ablate.stats.claims.claim_types import CLAIM_TYPES
    from types import SimpleNamespace

    c = SimpleNamespace(direction=1, bar=0.03, margin=0.02, bounds=(0.0, 0.03), null=0.3)
    assert CLAIM_TYPES["superiority"].refute_nulls(c) == ((-1, -0.03),)
    assert CLAIM_TYPES["non_inferiority"].refute_nulls(c) == ((-1, 0.02),)
    assert CLAIM_TYPES["equivalence"].refute_nulls(c) == ((1, 0.02), (-1, 0.02))
    # x far below y by more than the effect: the exact futility p is small; x above y: it is large
    x, y = np.linspace(0.20, 0.21, 6), np.linspace(0.30, 0.31, 6)
    assert CLAIM_TYPES["superiority"].refute_p(c, x, y) <= 1 / 924 + 1e-12
    assert CLAIM_TYPES["superiority"].refute_p(c, y, x) > 0.5
    # one-sample sign test: 6 of 6 seeds above the constant
    assert level.sign_p(np.full(6, 0.4), 0.3, +1) == pytest.approx(1 / 64)
    assert level.sign_p(np.r_[np.full(5, 0.4), 0.3], 0.3, +1) == pytest.approx(7 / 64)  # a tie counts against
    assert level.seeds_to_sign(0.025) == 6 and level.seeds_to_sign(0.005) == 8


def test_a_one_sample_verdict_needs_the_exact_sign_test():
    """Against a constant there are no labels to exchange: the sign test over seeds confirms the t-interval."""
    claim = {"baseline": None, "against": 0.30, "direction": "higher", "effect": 0.01}
    up = 0.33 + 0.002 * np.arange(8)
    row = _decide(claim, _table({"x": up}), plan={"looks": [8], "spending": "pocock"})
    assert row["verdict"] == "replicated" and "sign test p 0.0039 <= 0.025" in row["reason"]
    # two seeds collapse below the constant: the mean still clears it, the sign test (6 of 8) does not
    mixed = np.r_[0.40 + 0.001 * np.arange(6), 0.29, 0.29]
    row = _decide(claim, _table({"x": mixed}), plan={"looks": [8], "spending": "pocock"})
    assert row["verdict"] == "inconclusive" and "exact sign test over seeds does not" in row["reason"]
    assert _decide(claim, _table({"x": mixed}), plan={"looks": [8], "spending": "pocock"},
                   test="welch")["verdict"] == "replicated"
