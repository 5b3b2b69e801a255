"""`python -m ablate.studies.probe`: a study's preconditions measured on a testbed, and docs/testbed.md rendered."""

import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from ablate.studies.probe import compose, condition_overrides, main, preconditions, record, slug
from tools.testbed_doc import evals_block, probes_block, render_doc


def test_preconditions_are_the_studys_distinct_measured_checks_with_their_claims():
    cfg = compose(["experiment=curriculum_ladder_study"])
    found = {pre[0].split(" (")[0]: (pre, claims) for pre, claims in preconditions(cfg, [])}
    assert set(found) == {"frontier engaged", "frontier drops the easy level"}
    pre, claims = found["frontier drops the easy level"]  # declared once (study.preconditions), named by three claims
    assert pre[1:] == ("mean:curriculum/frac_n2@50:", "RLOO frontier", "no_tool", "<", 0.4)
    assert claims == ["frontier_hurts", "frontier_forgets", "replay_recovers"]
    only = preconditions(cfg, ["replay_recovers"])
    assert len(only) == 2 and only[1][1] == ["frontier_hurts", "frontier_forgets", "replay_recovers"]
    with pytest.raises(SystemExit, match="no such claim"):
        preconditions(cfg, ["frontier_forget"])


def test_a_condition_is_run_with_the_overrides_of_its_study_job():
    base = ["experiment=curriculum_study", "testbed=ladder23"]
    cfg = compose(base)
    assert condition_overrides(cfg, base, "RLOO none") == ["curriculum=none", "stage.pool_size=500"]
    assert condition_overrides(cfg, base, "IPO static") == ["stage=ipo", "stage.pairs.order=static"]
    tool = ["experiment=tool_annealing_study", "testbed=mixed_sft"]
    assert condition_overrides(compose(tool), tool, "tool=off") == ["tool=off"]
    with pytest.raises(SystemExit, match="not in study.names"):
        condition_overrides(cfg, base, "RLOO nothing")


def test_the_testbed_is_the_presets_choice_unless_the_command_line_moves_it():
    from ablate.studies.probe import testbed_of

    assert testbed_of(compose(["experiment=curriculum_study"])) == "tiny"
    assert testbed_of(compose(["experiment=curriculum_ladder_study"])) == "ladder23"
    assert testbed_of(compose(["experiment=tool_annealing_study", "testbed=mixed_sft"])) == "mixed_sft"


def test_a_probe_of_another_setting_is_its_own_testbed_and_never_reuses_the_defaults_runs():
    """`++curriculum.difficulty.bins=10` changes what is measured: its row and runs are its own; the thread
    count and the preset do not (`++`: the study's sweep sets the curriculum, so the key is added or set)."""
    from ablate.studies.probe import testbed_of

    base = ["experiment=threshold_study", "trainer.num_threads=1"]
    assert testbed_of(compose(base), base) == "tiny"
    moved = [*base, "++curriculum.difficulty.bins=10"]
    assert testbed_of(compose(moved), moved) == "tiny + ++curriculum.difficulty.bins=10"
    assert slug(testbed_of(compose(moved), moved)) == "tiny_curriculum.difficulty.bins_10"
    small = ["experiment=curriculum_ladder_study", "model=small", "curriculum.low=0.3"]
    assert testbed_of(compose(small[:2]), small) == "ladder23 (small) + curriculum.low=0.3"


def test_a_probe_at_the_second_scale_names_its_scale_and_never_replaces_the_tiny_rows():
    from ablate.studies.probe import study_of, testbed_of

    small = compose(["experiment=dapo_components_study", "model=small"])
    assert (study_of(small), testbed_of(small)) == ("dapo_components_study_small", "small")
    ladder = compose(["experiment=curriculum_ladder_study", "model=small"])
    assert (study_of(ladder), testbed_of(ladder)) == ("curriculum_ladder_study_small", "ladder23 (small)")
    tiny = compose(["experiment=dapo_components_study"])
    assert (study_of(tiny), testbed_of(tiny)) == ("dapo_components_study", "tiny")


def test_testbeds_change_what_the_study_preset_sets():
    assert compose(["experiment=tool_annealing_study"]).upstream.sft.trace == "calc"
    mixed = compose(["experiment=tool_annealing_study", "testbed=mixed_sft"])
    assert mixed.upstream.sft.trace == "mixed" and mixed.model.name_or_path == "upstream:sft"
    assert mixed.upstream.sft.max_steps == 200  # the rest of calc_sft stays
    assert list(compose(["experiment=curriculum_ladder_study"]).task.generator.counts) == [2, 3]
    cap = compose(["experiment=curriculum_study", "testbed=cap48"])
    assert cap.eval.max_new_tokens == 48 and cap.stage.sampling.max_new_tokens == 48
    assert compose([]).task.generator.counts == [3, 4]  # no testbed: the shipped defaults


def _row(testbed, value, status="held"):
    return dict(study="s", testbed=testbed, check="easy solved", claims="a b", metric="m", condition="RLOO none",
                op=">=", threshold=0.8, value=value, status=status, seeds=1, wall_s=60, overrides="x=1", commit="abc")


def test_record_replaces_the_rows_of_the_same_study_testbed_and_check(tmp_path):
    csv = tmp_path / "probes.csv"
    record(csv, [_row("tiny", 0.5, "failed"), _row("ladder", 0.7, "failed")])
    record(csv, [_row("ladder", 0.9)])
    table = pd.read_csv(csv)
    assert sorted(zip(table.testbed, table.value)) == [("ladder", 0.9), ("tiny", 0.5)]


def test_the_testbed_document_is_rendered_and_a_stale_one_is_caught(tmp_path):
    csv = tmp_path / "testbed" / "probes.csv"
    csv.parent.mkdir()
    record(csv, [_row("ladder", 0.9), _row("tiny", math.nan, "not measured")])
    (csv.parent / "evals").mkdir()
    summary = {"pass@1": 0.29, "by_operands": {"2": {"pass@1": 0.0, "coverage": 1.0, "mean_response_length": 32.1}},
               "verdicts": {"correct": 10, "wrong_numbers": 5, "substitution_error": 1}}
    (csv.parent / "evals" / "c23.json").write_text(json.dumps(
        {"name": "c23", "overrides": "task.generator.counts=[2,3]", "commit": "abc", "summary": summary}))
    doc = tmp_path / "testbed.md"
    doc.write_text("# t\n<!-- probes -->\nold\n<!-- /probes -->\nprose\n<!-- evals -->\n<!-- /evals -->\n")
    none = tmp_path / "no_findings"
    assert render_doc(csv, doc, check=True, findings_dir=none) == 1
    assert render_doc(csv, doc, findings_dir=none) == 0
    text = doc.read_text()
    assert "| s | easy solved | ladder | RLOO none (1) | `m` | >= 0.8 | 0.9 | **held** |" in text
    assert "**not measured**" in text and "prose" in text and "old" not in text
    assert "| c23 | `task.generator.counts=[2,3]` | 0.29 | 2: 0.000 | 2: 1.000 | 2: 32.1 | 1 / 6 | abc |" in text
    assert render_doc(csv, doc, check=True, findings_dir=none) == 0
    assert probes_block([]).count("\n") == 2 and evals_block(tmp_path / "nowhere").count("\n") == 2


def test_the_cli_names_what_is_missing(capsys):
    with pytest.raises(SystemExit):
        main(["testbed=ladder23"])
    assert "experiment=<preset>" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="declares no study claims"):
        main(["experiment=smoke"])
    # overrides may follow the options (argparse alone stopped at `--claim x ++key=value`)
    with pytest.raises(SystemExit, match="--claim nope: no such claim"):
        main(["experiment=threshold_study", "--claim", "nope", "++curriculum.low=0.3", "--no-record"])


@pytest.mark.slow
def test_a_probe_trains_the_condition_and_measures_its_precondition(tmp_path):
    csv = tmp_path / "probes.csv"
    overrides = ["experiment=[curriculum_ladder_study,smoke_study]", "upstream.sft.max_steps=4",
                 "upstream.sft.warmup_steps=1", "upstream.sft.pool_size=300", "trainer.num_threads=1"]
    assert main([*overrides, "--claim", "frontier_forgets", "--root", str(tmp_path / "probes"),
                 "--csv", str(csv)]) == 0
    rows = pd.read_csv(csv)
    row = rows[rows["check"].str.startswith("frontier drops")].iloc[0]  # frontier_forgets' second gate
    # the smoke-scale SFT is part of the testbed's name: a smoke probe never replaces a real row
    smoke_sft = "upstream.sft.max_steps=4 + upstream.sft.warmup_steps=1 + upstream.sft.pool_size=300"
    assert row.study == "curriculum_ladder_study" and row.testbed == f"ladder23 + {smoke_sft}"
    assert row.condition == "RLOO frontier"
    assert row.metric == "mean:curriculum/frac_n2@50:"
    if pd.isna(row.value):  # a smoke run logs 2 steps: nothing at step 50 and after to average
        assert row.status == "not measured"
    else:
        assert 0.0 <= row.value <= 1.0 and row.status == ("held" if row.value < 0.4 else "failed")
    assert row.claims == "frontier_hurts frontier_forgets replay_recovers"
    assert (tmp_path / "probes" / "curriculum_ladder_study" / slug(row.testbed) / "RLOO_frontier" / "seed_0"
            / "status.json").is_file()
    # the testbed's own starting point: the upstream SFT that run trained, as evaluated when it was cached
    # as a user runs it (a fresh process: this one's training turned every bar off), with a quiet console
    out = subprocess.run([sys.executable, "-m", "ablate.studies.probe", "--eval", "ladder sft", "--upstream", *overrides,
                          "--csv", str(csv)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr[-2000:]
    start = json.loads((tmp_path / "evals" / "ladder_sft.json").read_text())
    assert set(start["summary"]["by_operands"]) == {"2", "3"} and "upstream SFT of" in start["overrides"]
    # its weights' fingerprint is the one the probe's RLOO run started from (status.json init_sha256)
    run_status = json.loads((tmp_path / "probes" / "curriculum_ladder_study" / slug(row.testbed) / "RLOO_frontier"
                             / "seed_0" / "status.json").read_text())
    assert start["weights_sha256"] == run_status["init_sha256"] and len(start["commit"]) == 7
    with pytest.raises(SystemExit, match="train it first"):
        main(["--eval", "x", "--upstream", *overrides, "upstream.sft.max_steps=5", "--csv", str(csv)])


def test_the_committed_testbed_page_matches_what_the_probes_wrote(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    from tools.testbed_doc import main as render_main

    assert render_main(["docs/testbed.md", "--check"]) == 0, "run: python -m tools.testbed_doc docs/testbed.md"


def test_a_probe_row_names_the_commit_of_the_code_it_ran_not_of_the_working_directory(tmp_path, monkeypatch):
    """A worktree whose editable install points at another checkout runs that checkout's code: the row says so."""
    from ablate.rundir.status import git_sha
    from ablate.studies.probe import commit

    monkeypatch.chdir(tmp_path)  # no repository here: `git rev-parse` in the working directory would fail
    assert commit() == (git_sha() or "unknown")[:7] and commit() != "unknown"
