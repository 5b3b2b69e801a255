"""Registration: the study block frozen before the data decides; later changes are exploratory."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ablate.stats.claims.engine import evaluate
from ablate.stats.claims.registration import FILE, fingerprint, read_registration, register
from ablate.stats.claims.standing import ADDED, AMENDED, CONFIRMATORY, EXPLORATORY, REMOVED, decide
from ablate.stats.read.runs import StatsInputError

BLOCK = {"name": "toy_study", "alpha": 0.05, "plan": {"looks": [5], "spending": "pocock"}, "claims": [
    {"id": "kept", "claim": "B keeps A's level", "metric": "pass@1", "condition": "B", "baseline": "A",
     "type": "non_inferiority", "margin": 0.03},
    {"id": "up", "claim": "C beats A", "metric": "pass@1", "condition": "C", "baseline": "A", "effect": 0.05},
]}
VALUES = {"A": [0.30, 0.31, 0.29, 0.30, 0.31], "B": [0.27, 0.28, 0.26, 0.27, 0.28], "C": [0.40, 0.41, 0.39, 0.40, 0.42]}
STARTED = datetime(2026, 1, 2, tzinfo=timezone.utc)


def _table() -> pd.DataFrame:
    return pd.DataFrame([{"run": f"{c}{i}", "batch": 0, "condition": c, "seed": str(i), "regime": "no_tool",
                          "metric": "pass@1", "value": v} for c, vs in VALUES.items() for i, v in enumerate(vs)])


def _decide(current, reg, started=STARTED):
    return decide(current, reg, started, lambda declared: evaluate(declared, _table()))


def _registered(tmp_path, block=BLOCK, at="2026-01-01T00:00:00+00:00") -> Path:
    register(tmp_path / FILE, copy.deepcopy(block), commit="abc", now=at)
    return tmp_path / FILE


def test_register_writes_a_checked_file_and_never_overwrites(tmp_path):
    path = _registered(tmp_path)
    reg = read_registration(path)
    assert reg.original.block == BLOCK and reg.original.fingerprint == fingerprint(BLOCK)
    assert reg.original.commit == "abc" and reg.study == "toy_study"
    with pytest.raises(StatsInputError, match="never overwritten; pass --amend"):
        register(path, BLOCK)
    changed = copy.deepcopy(BLOCK)
    changed["claims"][0]["margin"] = 0.05
    register(path, changed, amend=True, now="2026-01-03T00:00:00+00:00")
    reg = read_registration(path)
    assert reg.original.block == BLOCK and len(reg.records) == 2  # the original is kept
    assert reg.records[1].changes == ["claim kept amended: margin: 0.03 -> 0.05"]
    raw = yaml.safe_load(path.read_text())
    raw["study"]["claims"][0]["margin"] = 0.1  # a hand edit
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(StatsInputError, match="edited by hand"):
        read_registration(path)


def test_a_margin_amended_after_the_runs_marks_that_claim_amended(tmp_path):
    reg = read_registration(_registered(tmp_path))
    current = copy.deepcopy(BLOCK)
    current["claims"][0]["margin"] = 0.05  # widened after seeing -0.03: now it would pass
    t = _decide(current, reg).table
    registered = t[(t["id"] == "kept") & (t["standing"] == CONFIRMATORY)].iloc[0]
    amended = t[(t["id"] == "kept") & (t["standing"] == AMENDED)].iloc[0]
    assert registered["margin"] == 0.03 and registered["verdict"] != "replicated"  # the registered margin decides
    assert amended["margin"] == 0.05 and amended["verdict"] == "replicated"
    assert amended["amendment"] == "margin: 0.03 -> 0.05"
    assert t[t["id"] == "up"]["standing"].tolist() == [CONFIRMATORY]


def test_a_removed_claim_stays_in_the_family_and_an_added_one_is_exploratory(tmp_path):
    reg = read_registration(_registered(tmp_path))
    current = copy.deepcopy(BLOCK)
    current["claims"] = [current["claims"][1], {"id": "new", "claim": "B beats A", "metric": "pass@1",
                                                "condition": "B", "baseline": "A", "effect": 0.03}]
    t = _decide(current, reg).table.set_index("id")
    assert t.loc["kept", "standing"] == REMOVED and t.loc["kept", "family_size"] == 2
    assert "still decided and counted in the family" in t.loc["kept", "amendment"]
    assert t.loc["up", "standing"] == CONFIRMATORY and t.loc["up", "family_size"] == 2
    assert t.loc["new", "standing"] == ADDED


def test_a_registration_later_than_the_first_run_makes_every_claim_exploratory(tmp_path):
    reg = read_registration(_registered(tmp_path, at="2026-01-03T00:00:00+00:00"))
    result = _decide(BLOCK, reg)
    assert set(result.table["standing"]) == {EXPLORATORY} and "registered after the data" in result.note
    unknown = _decide(BLOCK, reg, started=None)  # no start times: the order cannot be shown
    assert set(unknown.table["standing"]) == {EXPLORATORY}


def test_an_amendment_made_before_the_first_run_binds(tmp_path):
    path = _registered(tmp_path)
    changed = copy.deepcopy(BLOCK)
    changed["claims"][0]["margin"] = 0.05
    register(path, changed, amend=True, now="2026-01-01T12:00:00+00:00")  # still before the data
    t = _decide(changed, read_registration(path)).table
    assert t["standing"].tolist() == [CONFIRMATORY, CONFIRMATORY] and t["margin"].iloc[0] == 0.05


def test_no_registration_is_exploratory_and_says_so():
    result = _decide(BLOCK, None)
    assert set(result.table["standing"]) == {EXPLORATORY} and "No registration" in result.note
    from ablate.stats.render.claims import claims_tables

    text = "\n".join(claims_tables(result))
    assert "**Exploratory**" in text and "**Confirmatory**" not in text


def test_confirmatory_and_amended_claims_render_apart(tmp_path):
    from ablate.stats.render.claims import claims_tables

    reg = read_registration(_registered(tmp_path))
    current = copy.deepcopy(BLOCK)
    current["claims"][0]["margin"] = 0.05
    text = "\n".join(claims_tables(_decide(current, reg)))
    confirmatory, _, exploratory = text.partition("**Exploratory**")
    assert "**Confirmatory**" in confirmatory and "**kept**" in confirmatory and "**up**" in confirmatory
    assert "amended after the data (margin: 0.03 -> 0.05)" in exploratory and "**up**" not in exploratory


def test_the_register_command_composes_the_preset(tmp_path, capsys):
    from ablate.studies.register import main

    assert main(["experiment=tool_annealing_study", "--out", str(tmp_path)]) == 0
    reg = read_registration(tmp_path / FILE)
    assert reg.study == "tool_annealing_study" and {c["id"] for c in reg.original.block["claims"]} >= {"calc_persists"}
    assert main(["experiment=tool_annealing_study", "--out", str(tmp_path)]) == 2
    assert "--amend" in capsys.readouterr().err
    assert main(["experiment=tool_annealing_study", "+study.alpha=0.1", "--out", str(tmp_path), "--amend"]) == 0
    assert "study.alpha: (none) -> 0.1" in capsys.readouterr().out
    assert main(["experiment=curriculum_study", "--out", str(tmp_path / "new"), "--amend"]) == 2
    assert main(["experiment=no_such_study", "--out", str(tmp_path / "new")]) == 2
    assert "no_such_study" in capsys.readouterr().err


def test_ablate_stats_finds_the_registration_beside_the_report(tmp_path):
    import numpy as np

    from ablate.stats.__main__ import main
    from ablate.studies.calibrate import Setting, _difficulty, plant, write_planted

    sweep = plant(Setting(3, 3, "large", 0.02, (3,)), np.random.default_rng(3), _difficulty())
    dirs = write_planted(sweep, tmp_path / "multirun")
    report = tmp_path / "report"
    args = [*map(str, dirs), "--out", str(report), "--no-plots", "--quiet", "--resamples", "200"]
    assert main(args) == 0
    assert set(pd.read_csv(report / "claims.csv")["standing"]) == {EXPLORATORY}
    assert "No registration" in (report / "report.md").read_text()
    register(report / FILE, sweep.runs[0].study, now="2025-12-31T00:00:00+00:00")  # before the runs started
    assert main(args) == 0
    assert set(pd.read_csv(report / "claims.csv")["standing"]) == {CONFIRMATORY}
    other = tmp_path / "elsewhere"
    changed = {**sweep.runs[0].study, "alpha": 0.01}
    register(other / FILE, changed, now="2025-12-31T00:00:00+00:00")
    assert main([*args, "--registration", str(other)]) == 0
    text = (report / "report.md").read_text()
    assert "ran under a study block that is not the registered one" in text


def test_a_run_records_the_fingerprint_the_registration_holds():
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.studies.register import compose_study
    from ablate.run import study_fingerprint

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=oracle_tool_study"])
    assert study_fingerprint(cfg) == fingerprint(compose_study(["experiment=oracle_tool_study"]))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        assert study_fingerprint(compose("config", overrides=[])) is None


def test_an_amendment_names_a_changed_test_or_multiplicity_and_not_a_mechanism():
    from ablate.stats.claims.block_diff import block_changes

    before = {"plan": {"looks": [5]}, "claims": [], "multiplicity": "gatekeeping", "mechanisms": {"a": "final:x"}}
    after = {**before, "multiplicity": {"weights": {"c": 1.0}}, "test": "randomization", "mechanisms": {}}
    assert block_changes(before, after) == ["study.multiplicity: gatekeeping -> {'weights': {'c': 1.0}}",
                                            "study.test: (none) -> randomization"]
