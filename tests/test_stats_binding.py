"""Registrations that bind the code, and verdicts refused when an arm is aliased with where or when it ran
(issue 58, items 3 and 4)."""

from __future__ import annotations

import copy
import subprocess
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from ablate.rundir.code import blob_sha, code_fingerprints, combine, fingerprints_at, part_of
from ablate.stats.claims.aliasing import aliasing, place
from ablate.stats.claims.registration import FILE, read_registration, register
from ablate.stats.claims.standing import CONFIRMATORY, EXPLORATORY, decide
from ablate.stats.read.runs import StatsInputError
from test_stats_registration import BLOCK, STARTED, _table, evaluate

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
CODE = {"training": "t" * 64, "analysis": "a" * 64}


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_the_fingerprint_of_a_commit_equals_that_of_its_files(tmp_path):
    files = {"src/ablate/train.py": b"print('train')\n", "src/ablate/stats/maths.py": b"x = 1\n",
             "src/hydra_plugins/ablate_sweeper/grid.py": b"y = 2\n", "src/ablate/README.md": b"not code\n"}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert blob_sha(files["src/ablate/train.py"]) == _git(tmp_path, "hash-object", "src/ablate/train.py").strip()
    from_files = combine({rel[len("src/"):]: blob_sha(d) for rel, d in files.items()})
    assert fingerprints_at("HEAD", str(tmp_path)) == from_files
    # an analysis file moves only the analysis fingerprint, a training file only the training one
    moved = combine({rel[len("src/"):]: blob_sha(d + (b"#" if "stats" in rel else b"")) for rel, d in files.items()})
    assert moved["training"] == from_files["training"] and moved["analysis"] != from_files["analysis"]
    assert fingerprints_at("no-such-commit", str(tmp_path)) is None
    assert fingerprints_at(None) is None


def test_parts_of_the_package():
    assert part_of("ablate/lit/rloo.py") == "training"
    assert part_of("hydra_plugins/ablate_sweeper/grid_sweeper.py") == "training"
    assert part_of("ablate/stats/maths/level.py") == "analysis"
    assert part_of("ablate/external/tidy.py") == "analysis"
    assert part_of("ablate/conf/config.yaml") is None  # each run records its composed config
    assert part_of("ablate/lit/__pycache__/rloo.cpython-311.pyc") is None
    assert set(code_fingerprints()) == {"training", "analysis"}


def _decide_with(tmp_path, run_code: dict | None, registered=CODE, at="2026-01-01T00:00:00+00:00"):
    register(tmp_path / FILE, copy.deepcopy(BLOCK), commit="abc", now=at, code=registered)
    reg = read_registration(tmp_path / FILE)
    statuses = [{"code": run_code}] * 3 if run_code is not None else [{}] * 3
    return decide(BLOCK, reg, STARTED, lambda declared: evaluate(declared, _table()), statuses=statuses)


def test_runs_of_the_registered_training_code_are_confirmatory(tmp_path):
    result = _decide_with(tmp_path, CODE)
    assert set(result.table["standing"]) == {CONFIRMATORY}
    assert "Every compared run ran the registered training code tttttttttttt" in result.note
    assert read_registration(tmp_path / FILE).original.code == CODE


def test_runs_of_other_training_code_are_exploratory_and_the_note_says_why(tmp_path):
    result = _decide_with(tmp_path, {**CODE, "training": "u" * 64})
    assert set(result.table["standing"]) == {EXPLORATORY}
    assert "3 of 3 run(s) ran training code (uuuuuuuuuuuu) other than the registered tttttttttttt" in result.note
    assert "would be confirmatory, but the code differs" in result.note


def test_runs_without_a_fingerprint_are_not_compared_and_do_not_unbind(tmp_path):
    result = _decide_with(tmp_path, None)
    assert set(result.table["standing"]) == {CONFIRMATORY}
    assert "not compared" in result.note


def test_analysis_code_other_than_the_registered_is_called_a_re_analysis(tmp_path):
    assert "a re-analysis" in _decide_with(tmp_path, CODE).note  # CODE's analysis is not this checkout's
    here = code_fingerprints()
    assert "re-analysis" not in _decide_with(tmp_path / "x", here, registered=here).note


def test_an_amendment_may_bind_new_code_alone_and_names_it(tmp_path):
    register(tmp_path / FILE, copy.deepcopy(BLOCK), commit="abc", now="2026-01-01T00:00:00+00:00", code=CODE)
    with pytest.raises(StatsInputError, match="the study block and the code are unchanged"):
        register(tmp_path / FILE, copy.deepcopy(BLOCK), amend=True, now="2026-01-01T01:00:00+00:00", code=CODE)
    new = {**CODE, "training": "v" * 64}
    reg = register(tmp_path / FILE, copy.deepcopy(BLOCK), amend=True, now="2026-01-01T01:00:00+00:00", code=new)
    assert reg.records[-1].changes == ["training code tttttttttttt -> vvvvvvvvvvvv"]
    bound = decide(BLOCK, read_registration(tmp_path / FILE), STARTED,
                   lambda declared: evaluate(declared, _table()), statuses=[{"code": new}])
    assert set(bound.table["standing"]) == {CONFIRMATORY}


def test_a_hand_edited_code_entry_is_one_clear_line(tmp_path):
    path = _decide_with(tmp_path, CODE) and tmp_path / FILE
    path.write_text(path.read_text().replace("training: " + "t" * 64, "training: 3"))
    with pytest.raises(StatsInputError, match="`code` must map training and analysis"):
        read_registration(path)


def _place(machine="auto", torch="2.13.0+cpu", minutes=0):
    return {"machine": machine, "torch": torch, "start": T0 + timedelta(minutes=minutes)}


@pytest.mark.parametrize("arm, other, why", [
    ([_place("auto, AVX512")] * 3, [_place("auto, AVX2")] * 3, "different machines (auto, AVX512 vs auto, AVX2)"),
    ([_place(torch="2.11.0")] * 3, [_place()] * 3, "different torch versions"),
    ([_place(minutes=m) for m in (0, 1, 2)], [_place(minutes=m) for m in (3, 4, 5)], "separate time spans"),
    ([_place(minutes=m) for m in (3, 4, 5)], [_place(minutes=m) for m in (0, 1, 2)], "separate time spans"),
])
def test_arms_aliased_with_a_machine_a_build_or_a_time_span(arm, other, why):
    assert why in aliasing(arm, other)


@pytest.mark.parametrize("arm, other", [
    ([_place("auto, AVX512"), _place("auto, AVX2")], [_place("auto, AVX2"), _place("auto, AVX512")]),  # balanced
    ([_place(minutes=m) for m in (0, 2, 4)], [_place(minutes=m) for m in (1, 3, 5)]),  # interleaved
    ([{"machine": None, "torch": None, "start": None}] * 2, [_place()] * 2),  # unknown: nothing to compare
])
def test_arms_that_share_where_and_when_are_compared(arm, other):
    assert aliasing(arm, other) is None


def test_ablate_stats_refuses_a_verdict_whose_arms_ran_in_separate_time_spans(tmp_path):
    from ablate.stats.__main__ import main
    from ablate.studies.calibrate import Setting, _difficulty, plant, write_planted

    sweep = plant(Setting(3, 3, "large", 0.3, (3,)), np.random.default_rng(3), _difficulty())
    args_for = lambda d: [*map(str, d), "--out", str(tmp_path / "report"), "--no-plots", "--quiet",  # noqa: E731
                          "--resamples", "200"]
    dirs = write_planted(sweep, tmp_path / "interleaved")
    assert main(args_for(dirs)) == 0
    before = pd.read_csv(tmp_path / "report" / "claims.csv")
    assert not before["reason"].astype(str).str.contains("refused").any()
    for run in sweep.runs:  # arm b's seeds all after arm a's
        later = 60 * (run.label == "arm=b") + int(run.seed)
        run.status = {**run.status, "started_at": (T0 + timedelta(minutes=later)).isoformat()}
    dirs = write_planted(sweep, tmp_path / "blocks")
    assert main(args_for(dirs)) == 0
    after = pd.read_csv(tmp_path / "report" / "claims.csv")
    decided = after[after["verdict"] != "descriptive"]
    assert decided["reason"].str.startswith("refused").all() and set(decided["verdict"]) == {"not testable"}
    assert "separate time spans" in (tmp_path / "report" / "report.md").read_text()


def test_a_run_place_reads_the_first_attempt_and_the_cpu_level():
    from ablate.stats.read.runs import Run

    run = Run(path=None, rel="r", overrides=(), condition=(), seed="0", state="completed", evals={}, metrics=None,
              status={"started_at": "2026-01-01T05:00:00+00:00", "versions": {"torch": "2.13.0+cpu",
                      "cpu_capability": "AVX2"}, "history": [{"started_at": "2026-01-01T01:00:00+00:00"}]},
              config={"trainer": {"accelerator": "auto"}})
    assert place(run) == {"machine": "auto, AVX2", "torch": "2.13.0+cpu", "start": T0 + timedelta(hours=1)}


def test_a_clone_without_the_history_reads_the_fingerprints_the_history_once_gave(tmp_path, monkeypatch):
    from ablate.rundir import code

    monkeypatch.setattr(code, "KNOWN", {})
    monkeypatch.setattr(code, "RESOLVED", {})
    (tmp_path / "known.json").write_text('{"abc123": {"training": "t", "analysis": "a"}}')
    assert code.fingerprints_at("abc123", str(tmp_path)) is None  # no git repository there, nothing known yet
    code.use_known(tmp_path / "known.json")
    assert code.fingerprints_at("abc123", str(tmp_path)) == {"training": "t", "analysis": "a"}
    assert '"abc123"' in code.known_text()


def test_an_amendment_between_looks_binds_the_later_looks_runs_only(tmp_path):
    """A run is held to the registration version in force when it started: an amendment made after look 1
    binds look 2's runs (DAPO's look 2), never look 1's, and a study with look-1 runs of other code stays
    exploratory whatever look 2 ran."""
    register(tmp_path / FILE, copy.deepcopy(BLOCK), commit="abc", now="2026-01-01T00:00:00+00:00", code=CODE)
    new = {**CODE, "training": "v" * 64}
    register(tmp_path / FILE, copy.deepcopy(BLOCK), amend=True, now="2026-01-03T00:00:00+00:00", code=new)
    reg = read_registration(tmp_path / FILE)
    look1 = [{"code": CODE, "started_at": "2026-01-02T00:00:00+00:00"}] * 2
    look2 = [{"code": new, "started_at": "2026-01-04T00:00:00+00:00"}] * 2
    result = decide(BLOCK, reg, STARTED, lambda declared: evaluate(declared, _table()), statuses=look1 + look2)
    assert set(result.table["standing"]) == {CONFIRMATORY}
    assert "2 run(s) ran the code a later amendment bound before they started" in result.note
    # look 2 run at the first version's code, after the amendment bound new code: not confirmatory
    stale = [{"code": CODE, "started_at": "2026-01-04T00:00:00+00:00"}]
    result = decide(BLOCK, reg, STARTED, lambda declared: evaluate(declared, _table()), statuses=look1 + stale)
    assert set(result.table["standing"]) == {EXPLORATORY} and "1 of 3 run(s)" in result.note
