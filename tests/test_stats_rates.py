"""`type: success_rate`: a recover / collapse claim decided on how many seeds recover (stats/maths/rates.py)."""

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from statsmodels.stats.proportion import confint_proportions_2indep

from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.claims.study import check_study_block
from ablate.stats.maths import level, rates
from ablate.stats.values.table import VALUE_COLUMNS


def _study(alpha=0.05, looks=(5, 10, 20), test="welch", **claim):
    c = {"id": "recovers", "claim": "more seeds recover", "metric": "pass@1", "condition": "x", "baseline": "y",
         "type": "success_rate", "success": ">=0.3", "effect": 0.4}
    c.update(claim)
    return {"alpha": alpha, "test": test, "plan": {"looks": list(looks), "spending": "pocock"}, "claims": [c]}


def _table(x, y):
    rows = [(f"{arm}{j}", 0, arm, j, "no_tool", "pass@1", float(v)) for arm, vals in (("x", x), ("y", y))
            for j, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def test_the_exact_test_and_interval_are_fishers_and_newcombes_by_hand():
    # 5/5 vs 0/5: one table of the C(10, 5) = 252 with these margins is as extreme
    assert rates.exact_p(5, 5, 0, 5) == pytest.approx(1 / 252)
    assert rates.exact_p(5, 5, 0, 5) == pytest.approx(level.floor_p(5, 5))  # the floor the declaration checks use
    # 4/6 vs 1/5, lower: P(K <= 4) for K ~ hypergeometric(11 seeds, 5 successes, 6 drawn)
    assert rates.exact_p(4, 6, 1, 5, -1) == pytest.approx(scipy.stats.hypergeom.cdf(4, 11, 5, 6))
    lo, hi = rates.newcombe(4, 6, 1, 5, 0.9)
    ref = confint_proportions_2indep(4, 6, 1, 5, method="newcomb", compare="diff", alpha=0.1)
    assert (lo, hi) == pytest.approx(tuple(map(float, ref)))
    assert list(rates.meets([0.1, 0.3, 0.5], ">=", 0.3)) == [0, 1, 1]


def test_a_bimodal_arm_in_one_mode_fools_the_mean_and_not_the_rate():
    """Five seeds that all landed in the recover mode (+0.04) against a normal arm of the same mean:
    the mean claim replicates (a false positive no test of means can avoid), the rate claim does not,
    because 5 of 5 against 3 of 5 above the threshold is no evidence the rates differ."""
    x = [0.385, 0.395, 0.39, 0.383, 0.397]
    y = [0.36, 0.35, 0.34, 0.355, 0.345]
    problems: list[str] = []
    mean = parse_declared(_study(test="randomization", type="superiority", success=None, effect=0.01), problems)
    rate = parse_declared(_study(success=">=0.35"), problems)
    assert not problems
    assert evaluate(mean, _table(x, y)).table["verdict"].iloc[0] == "replicated"
    row = evaluate(rate, _table(x, y)).table.iloc[0]
    assert row["verdict"] == "inconclusive"
    assert row["estimate"] == pytest.approx(5 / 5 - 3 / 5) and row["mean"] == 1.0 and row["mean_baseline"] == 0.6
    assert row["rate"].startswith("5/5 >= 0.35")


def test_every_seed_recovering_against_none_replicates_with_the_exact_tests_p():
    problems: list[str] = []
    rate = parse_declared(_study(), problems)
    row = evaluate(rate, _table([0.5] * 5, [0.1] * 5)).table.iloc[0]
    assert row["verdict"] == "replicated" and "Fisher" in row["reason"] and row["estimate"] == 1.0
    assert row["excluded"] == "0"
    # the rate interval excludes the effect of interest (0.4): 2/5 vs 2/5 at a look that can decide
    row = evaluate(parse_declared(_study(looks=(20,)), problems), _table([0.5] * 8 + [0.1] * 12,
                                                                         [0.5] * 8 + [0.1] * 12)).table.iloc[0]
    assert row["verdict"] == "not replicated" and "effect of interest" in row["reason"]


@pytest.mark.parametrize("bad, words", [
    ({"success": None}, "success"), ({"baseline": None}, "baseline"), ({"effect": 2.0}, "(0, 1]"),
])
def test_a_success_rate_claim_without_its_threshold_baseline_or_a_share_is_refused(bad, words):
    problems = check_study_block(_study(**bad))
    assert any("success_rate" in p and words in p for p in problems), problems


def test_a_first_look_the_exact_test_cannot_decide_is_refused_whatever_the_study_test():
    # 3 vs 3: Fisher's floor is 1/C(6, 3) = 1/20, above the first Pocock look's one-sided level at alpha 0.05
    problems = check_study_block(_study(looks=(3, 6, 12)))
    assert len(problems) == 1 and "first look (3 vs 3 seeds)" in problems[0] and "1/20" in problems[0]
    assert check_study_block(_study()) == []


@pytest.mark.parametrize("shift", [-0.5, 0.4])
def test_the_shifted_exact_test_holds_its_level_at_every_rate_on_its_null(shift):
    """P(shifted_p <= a) <= a for the rate pairs that differ by exactly `shift`, summed exactly over every
    count pair of 6 vs 5 seeds: the test 'not replicated' needs is exact whatever the baseline's rate."""
    n, m = 6, 5
    p_of = np.array([[rates.shifted_p(k, n, j, m, shift) for j in range(m + 1)] for k in range(n + 1)])
    for py in np.linspace(0.0, 1.0, 41):
        px = py + shift
        if not 0 <= px <= 1:
            continue
        mass = np.outer(scipy.stats.binom.pmf(np.arange(n + 1), n, px), scipy.stats.binom.pmf(np.arange(m + 1), m, py))
        for a in (0.01, 0.05, 0.2):
            assert mass[p_of <= a].sum() <= a + 1e-9, (py, a)


def test_the_shifted_exact_test_reads_towards_zero_from_the_effect():
    # claimed lower by 0.5: every seed of both arms keeping it is the strongest evidence against that
    assert rates.shifted_p(10, 10, 10, 10, -0.5) < rates.shifted_p(9, 10, 10, 10, -0.5) < 0.05
    assert rates.shifted_p(0, 5, 5, 5, -0.5) == pytest.approx(1.0)  # a full collapse is no evidence against it
    # worst case by hand: the baseline at 1, the condition at 0.5, only k = n is as extreme as n/n vs n/n
    assert rates.shifted_p(4, 4, 4, 4, -0.5) >= 0.5 ** 4 - 1e-12
    # claimed higher by 0.4: the mirror image
    assert rates.shifted_p(3, 8, 3, 8, 0.4) == pytest.approx(rates.shifted_p(5, 8, 5, 8, -0.4))


def test_not_replicated_needs_the_exact_test_of_the_effect_of_interest():
    """10 of 10 seeds keeping the skill in both arms: Newcombe's interval at the first look of 10/20 at alpha
    0.05 / 6 excludes a difference of 0.5 ([-0.44, 0.44]), but the exact test of that difference gives p 0.014
    against the look's one-sided 0.0026, so the look stays open; at 20 seeds an arm it decides."""
    problems: list[str] = []
    study = _study(alpha=0.05 / 6, looks=(10, 20), direction="lower", effect=0.5, success=">=0.1")
    rate = parse_declared(study, problems)
    assert not problems
    row = evaluate(rate, _table([0.3] * 10, [0.3] * 10)).table.iloc[0]
    assert row["verdict"] == "inconclusive" and "exact test of a difference of -0.5" in row["reason"], row["reason"]
    assert row["ci_low"] > -0.5  # the interval alone would have said "not replicated"
    row = evaluate(parse_declared({**study, "plan": {"looks": [20], "spending": "pocock"}}, problems),
                   _table([0.3] * 20, [0.3] * 20)).table.iloc[0]
    assert row["verdict"] == "not replicated" and "exact test of a difference of -0.5: p" in row["reason"]
