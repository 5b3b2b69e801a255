"""Issue 61: the `study:` block has a schema (ablate.stats.claims.schema), read where a block is parsed: a
misspelled key anywhere in it is named with the known ones before any compute, numbers are read by their
field's type (a claim type's own keys included), every key is documented, and every block this repository
ever registered or ships reads without an unknown key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from ablate.checks import check_study
from ablate.config import ConfigError
from ablate.stats.claims.claim_types import CLAIM_TYPES
from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.schema import ClaimKeys, PlanKeys, PreconditionKeys, StudyKeys, names
from ablate.stats.claims.study import check_study_block

ROOT = Path(__file__).resolve().parents[1]


def _block(**over) -> dict:
    claim = {"id": "c", "claim": "A beats B", "metric": "pass@1", "condition": "A", "baseline": "B", "effect": 0.05}
    return {"name": "s", "plan": {"looks": [5, 10]}, "test": "welch", "claims": [claim], **over}


def test_a_well_formed_block_has_no_problem():
    assert check_study_block(_block()) == []


@pytest.mark.parametrize("where, change, named", [
    ("block", lambda b: b.update(alhpa=0.01), "unknown key(s) alhpa; known: alpha, baselines"),
    ("plan", lambda b: b["plan"].update(futilty=10), "plan: unknown key(s) futilty; known: futility, looks, spending"),
    ("claim", lambda b: b["claims"][0].update(efect=0.05), "claim 'c': unknown key(s) efect; known: "),
    ("precondition", lambda b: b["claims"][0].update(precondition={"check": "on", "metric": "m", "op": ">=",
                                                                   "treshold": 0.5}),
     "claim 'c' precondition 'on': unknown key(s) treshold; known: check, condition, metric, op, reason, regime, "
     "threshold"),
])
def test_a_misspelled_key_is_named_with_the_known_ones(where, change, named):
    block = _block()
    change(block)
    problems = check_study_block(block)
    assert any(p.startswith(named) for p in problems), problems


def test_start_up_refuses_a_misspelled_plan_key_before_any_compute():
    # before the schema, `futilty: 10` was silently dropped: the study ran with no futility rule at all
    cfg = OmegaConf.create({"study": _block(plan={"looks": [5, 10], "futilty": 10})})
    with pytest.raises(ConfigError, match=r"plan: unknown key\(s\) futilty"):
        check_study(cfg)


def test_numbers_are_read_by_their_fields_type_a_claim_types_own_included():
    gain = {"id": "g", "claim": "A beats B", "metric": "pass@1", "condition": "A", "baseline": "B", "effect": "0.05"}
    keeps = {"id": "k", "claim": "A keeps most of the gain", "metric": "pass@1", "condition": "A2", "baseline": "A",
             "type": "keeps_gain", "requires": "g", "margin_share": "0.5"}
    problems: list[str] = []
    declared = parse_declared({"claims": [gain, keeps]}, problems)
    assert problems == []
    claims = {c.id: c for c in declared.claims}
    assert claims["g"].effect == 0.05 and claims["k"].margin_share == 0.5 and claims["k"].get("margin_share") == 0.5
    problems = []
    parse_declared({"claims": [gain, {**keeps, "margin_share": -1}]}, problems)
    assert "claim 'k': margin_share must be a positive finite number, got -1" in problems


def test_the_known_keys_grow_with_a_registered_type():
    assert "margin_share" not in names(ClaimKeys) and CLAIM_TYPES["keeps_gain"].keys == ("requires", "margin_share")
    block = _block()
    block["claims"][0]["bounds"] = [0, 0.05]  # bounded's own key: known, though this claim is superiority
    assert not any("unknown key" in p for p in check_study_block(block))


def test_every_key_is_documented_in_the_stats_guide():
    doc = (ROOT / "docs" / "stats.md").read_text()
    schemas = (StudyKeys, ClaimKeys, PreconditionKeys, PlanKeys, *(t.Keys for t in CLAIM_TYPES.values()))
    missing = [f"{s.__name__}.{n}" for s in schemas for n in names(s)
               if not re.search(rf"(`(study\.)?{n}`|\b{n}:)", doc)]
    assert not missing, f"docs/stats.md (Claims and verdicts) does not mention: {', '.join(missing)}"


def _blocks():
    for path in sorted([*(ROOT / "src/ablate/conf/experiment").glob("*.yaml"),
                        *(ROOT / "docs/findings").rglob("registration.yaml")]):
        doc = yaml.safe_load(path.read_text())
        blocks = [doc.get("study")] + [a.get("study") for a in doc.get("amendments") or []]
        yield from ((path.relative_to(ROOT), b) for b in blocks if isinstance(b, dict))


def test_every_shipped_and_registered_block_reads_without_an_unknown_key():
    seen = list(_blocks())
    assert len(seen) >= 10  # the presets and the committed registrations
    for path, block in seen:
        problems: list[str] = []
        parse_declared(block, problems)
        assert not [p for p in problems if "unknown key" in p], (path, problems)
