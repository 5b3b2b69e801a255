"""Claim types: claims that cannot fail are refused at declaration, labels say what the interval
excluded, gates are declared once and never read the claim's own outcome, and a new type is one class."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import pytest

from ablate.stats.claims.claim_types import CLAIM_TYPES, ClaimType, Decision, label
from ablate.stats.claims.method_checks import one_signed
from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.claims.schema import key
from ablate.stats.claims.study import check_study_block


def _claim(**kw) -> dict:
    return {"id": "c", "claim": "B beats A", "metric": "pass@1", "condition": "B", "baseline": "A", "effect": 0.03, **kw}


def _problems(*claims, **block) -> str:
    """The claims' declaration problems; Welch decides (the first-look refusal of the default exact guard
    is test_stats_level's)."""
    return " | ".join(check_study_block({"claims": list(claims), "test": "welch", **block}))


def _values(**arms) -> pd.DataFrame:
    return pd.DataFrame([{"run": f"{c}{i}", "batch": 0, "condition": c, "seed": str(i), "regime": "no_tool",
                          "metric": "pass@1", "value": v} for c, vs in arms.items() for i, v in enumerate(vs)])


@pytest.mark.parametrize("metric, sign", [("pass@16 - pass@1", 1), ("pass@1 - pass@16", -1),
                                          ("coverage - pass@1", 1), ("by_operands/3/pass@8 - by_operands/3/pass@1", 1),
                                          ("pass@1 - pass^4", 1), ("pass@1 - coverage", -1), ("pass@8 - pass@8", 0),
                                          ("pass@1", 0), ("mean:train/reward_mean@90:99 - mean:train/reward_mean@57:66", 0)])
def test_differences_one_signed_by_construction(metric, sign):
    assert one_signed(metric) == sign


def test_a_one_signed_metric_is_compared_only_between_conditions_naming_the_fix():
    text = _problems(_claim(metric="pass@16 - pass@1", baseline=None))
    assert "'c'" in text and "one-signed by construction" in text and "compare it between conditions" in text
    assert "by construction" in _problems(_claim(metric="pass@1 - pass@16", baseline=None, direction="lower"))
    # against a bar, too: any uncollapsed run clears a small one (issue 58: best_of_n_helps against 0.03)
    assert "one-signed" in _problems(_claim(metric="pass@16 - pass@1", baseline=None, against=0.05))
    assert "one-signed" in _problems(_claim(metric="coverage - pass@1", baseline=None, type="non_inferiority",
                                             margin=0.02))
    assert _problems(_claim(metric="pass@16 - pass@1")) == ""  # between conditions it can go either way
    assert _problems(_claim(metric="pass@16 - pass@1", baseline=None, type="descriptive")) == ""  # decides nothing


def test_cost_is_decided_in_cpu_seconds_or_counted_work_never_wall_seconds():
    for wall in ("slope:time/elapsed_s", "reach_time:val/pass@1>=baseline", "final:time/elapsed_s"):
        assert "reads wall seconds" in _problems(_claim(metric=wall, direction="lower", effect=1))
        assert _problems(_claim(metric=wall, type="descriptive")) == ""  # describing wall time is fine
    for cost in ("slope:time/cpu_s", "reach_cpu:val/pass@1>=baseline", "mean:rollout/tokens"):
        assert _problems(_claim(metric=cost, direction="lower", effect=1)) == ""


def test_a_cross_regime_claim_names_its_regimes_in_its_sentence():
    text = _problems(_claim(regime="tool", baseline_regime="no_tool"))
    assert "compare like with like" in text and "'(tool vs no_tool)'" in text
    assert _problems(_claim(claim="A with the tool beats B without (tool vs no_tool)", regime="tool",
                            baseline_regime="no_tool")) == ""
    assert _problems(_claim(regime="tool", baseline_regime="tool")) == ""  # like with like
    assert "smallest effect of interest" in _problems(_claim(effect=None))
    assert _problems(_claim(effect=None, paper=0.1)) == ""  # the paper's effect stands in


def test_the_label_says_what_the_interval_excluded():
    c = parse_declared({"claims": [_claim(effect=0.05)]}, []).claims[0]
    decide = CLAIM_TYPES["superiority"].decide
    assert label(*decide(c, 0.01, 0.09)[:2]) == "replicated (excludes 0)"
    assert label(*decide(c, 0.01, 0.04)[:2]) == "not replicated (excludes 0 and the effect of interest)"
    assert label(*decide(c, -0.01, 0.04)[:2]) == "not replicated (excludes the effect of interest)"
    assert label(*decide(c, -0.01, 0.09)[:2]) == "inconclusive"
    table = evaluate(parse_declared({"plan": {"looks": [5]}, "claims": [_claim(effect=0.5)]}, []),
                     _values(A=[0.30, 0.31, 0.29, 0.30, 0.31], B=[0.40, 0.41, 0.39, 0.40, 0.42])).table
    assert table["verdict"].iloc[0] == "not replicated" and table["excluded"].iloc[0] == "0 and the effect of interest"


def test_keeping_most_of_a_gain_needs_the_gain_and_a_share_of_it():
    assert "type: keeps_gain" in _problems(_claim(claim="keeps most of the gain", type="non_inferiority", margin=0.05))
    gain = _claim(id="gain", claim="C beats A", condition="C")
    keeps = _claim(id="keeps", claim="B keeps most of C's gain", baseline="C", type="keeps_gain",
                   requires="gain", margin_share=0.5)
    assert "`requires: <claim id>`" in _problems(gain, {**keeps, "margin_share": None})
    assert "declared before it" in _problems(keeps, gain)
    block = {"plan": {"looks": [5]}, "claims": [gain, keeps]}
    a = [0.30, 0.31, 0.29, 0.30, 0.31]
    no_gain = evaluate(parse_declared(block, []), _values(A=a, B=a, C=a)).table.set_index("id")
    assert no_gain.loc["keeps", "verdict"] == "not testable" and "requires gain" in no_gain.loc["keeps", "reason"]
    c = [0.50, 0.51, 0.49, 0.50, 0.51]
    kept = evaluate(parse_declared(block, []), _values(A=a, B=[v - 0.01 for v in c], C=c)).table.set_index("id")
    assert kept.loc["gain", "verdict"] == "replicated"
    assert kept.loc["keeps", "margin"] == pytest.approx(0.5 * kept.loc["gain", "ci_low"])  # half the gain it is sure of
    assert kept.loc["keeps", "verdict"] == "replicated"
    lost = evaluate(parse_declared(block, []), _values(A=a, B=[v + 0.05 for v in a], C=c)).table.set_index("id")
    assert lost.loc["keeps", "verdict"] == "not replicated"


def test_a_little_effect_is_an_interval_claim_with_both_bounds():
    assert "type: bounded" in _problems(_claim(claim="DPO adds little"))
    assert "both bounds" in _problems(_claim(claim="DPO adds little", type="bounded"))
    block = {"plan": {"looks": [5]}, "claims": [_claim(claim="B adds little", type="bounded", bounds=[0, 0.05])]}
    a = [0.30, 0.31, 0.29, 0.30, 0.31]
    small = evaluate(parse_declared(block, []), _values(A=a, B=[v + 0.02 for v in a])).table.iloc[0]
    large = evaluate(parse_declared(block, []), _values(A=a, B=[v + 0.2 for v in a])).table.iloc[0]
    assert small["verdict"] == "replicated" and large["verdict"] == "not replicated"


def test_gates_are_declared_once_by_name_and_never_read_the_outcome():
    named = {"engaged": {"check": "engaged", "metric": "mean:explore", "condition": "B", "op": "<", "threshold": 0.5},
             "solved": {"check": "A solves", "metric": "pass@1", "condition": "A", "op": ">=", "threshold": 0.8}}
    assert _problems(_claim(precondition="engaged"), preconditions=named) == ""
    assert "not in the study's `preconditions:`" in _problems(_claim(precondition="nope"), preconditions=named)
    text = _problems(_claim(precondition=["engaged", "solved"]), preconditions=named)
    assert "reads the claim's own outcome" in text and "'A solves'" in text
    assert _problems(_claim(metric="pass@16", precondition="solved"), preconditions=named) == ""  # another metric
    block = {"plan": {"looks": [5]}, "preconditions": named,
             "claims": [_claim(metric="pass@16", precondition=["engaged", "solved"])]}
    declared = parse_declared(block, [])
    assert [g.check for g in declared.claims[0].gates] == ["engaged", "A solves"]
    rows = _values(A=[0.5] * 5, B=[0.5] * 5)
    rows = pd.concat([rows.assign(metric="pass@16"), rows.assign(metric="mean:explore", regime="train", value=0.2)])
    row = evaluate(declared, rows).table.iloc[0]
    assert row["verdict"] == "not testable" and "A solves" in row["reason"]  # the second gate failed (0.5 < 0.8)


def test_start_up_refuses_a_claim_that_cannot_fail_before_any_compute():
    from omegaconf import OmegaConf

    from ablate.checks import check_study
    from ablate.config import ConfigError

    cfg = OmegaConf.create({"study": {"claims": [_claim(metric="pass@16 - pass@1", baseline=None)]}})
    with pytest.raises(ConfigError, match="claim 'c'.*by construction"):
        check_study(cfg)


def test_a_new_claim_type_is_one_registered_class():
    @CLAIM_TYPES.register
    class AtLeast(ClaimType):
        """The difference is at least `floor` (a one-sided claim with its own bar)."""

        name = "at_least"

        @dataclass(frozen=True)
        class Keys:
            floor: float = key(None, "the difference it must exceed")

        def check(self, claim, raw, problems):
            if claim.get("floor") is None:
                problems.append(f"claim {claim.id!r}: an at_least claim needs `floor`")

        def decide(self, claim, lo, hi):
            floor = float(claim.get("floor"))
            if lo > floor:
                return Decision("replicated", f"effects under {floor:g}", "above the floor")
            if hi < floor:
                return Decision("not replicated", f"effects over {floor:g}", "below the floor")
            return Decision("inconclusive", "", "holds the floor")

    try:
        assert "needs `floor`" in _problems(_claim(type="at_least"))
        block = {"plan": {"looks": [5]}, "claims": [_claim(type="at_least", floor=0.05)]}
        refused = check_study_block(block)  # the default test needs an exact test the new type lacks
        assert len(refused) == 1 and "has no randomization test" in refused[0] and "test: welch" in refused[0]
        block["test"] = "welch"
        assert check_study_block(block) == []
        a = [0.30, 0.31, 0.29, 0.30, 0.31]
        row = evaluate(parse_declared(block, []), _values(A=a, B=[v + 0.1 for v in a])).table.iloc[0]
        assert (row["verdict"], row["excluded"]) == ("replicated", "effects under 0.05")
        assert math.isnan(row["bar"]) or row["bar"] == 0.03
    finally:
        del CLAIM_TYPES["at_least"]
