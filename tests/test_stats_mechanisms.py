"""Declared mechanisms (study.mechanisms): computed per run by ablate.stats through the values table,
written to mechanisms.csv and report.md, never part of what a registration fingerprints."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def test_changes_is_the_share_of_consecutive_points_that_differ():
    from ablate.stats.values.table import curve_value

    frame = pd.DataFrame({"level": [0, 0, 1, 1, 2, 1, 1]}, index=pd.Index(range(7), name="step"))
    assert curve_value(frame, "changes:level") == pytest.approx(3 / 6)
    assert curve_value(frame, "changes:level@3:") == pytest.approx(2 / 3)  # 1, 2, 1, 1
    assert np.isnan(curve_value(frame, "changes:level@6:"))  # one point: nothing can change


def test_a_bad_mechanism_is_refused_at_declaration():
    from ablate.stats.claims.study import check_study_block

    block = {"plan": {"looks": [3]}, "claims": [], "mechanisms": {"lvl": "median:curriculum/level"}}
    (problem,) = check_study_block(block)
    assert "mechanisms.lvl" in problem and "median:curriculum/level" in problem
    assert check_study_block({**block, "mechanisms": {"lvl": "mean:curriculum/level@96:"}}) == []


def test_mechanisms_do_not_change_the_registered_fingerprint():
    from ablate.stats.claims.registration import fingerprint

    block = {"plan": {"looks": [3]}, "claims": [{"id": "a"}]}
    assert fingerprint({**block, "mechanisms": {"x": "final:val/pass@1"}}) == fingerprint(block)
    assert fingerprint({**block, "effect": 0.05}) != fingerprint(block)


def test_the_report_writes_each_runs_mechanisms(tmp_path):
    from ablate.rundir.atomic import write_text
    from ablate.stats.__main__ import main
    from ablate.studies.calibrate import Setting, _difficulty, plant, write_planted

    sweep = plant(Setting(3, 3, "large", 0.0, (3,)), np.random.default_rng(2), _difficulty())
    mechs = {"level_q2": "mean:curriculum/level@50:", "flips": "changes:curriculum/level"}
    sweep.runs = [replace(r, config={**r.config, "study": {**r.config["study"], "mechanisms": mechs}})
                  for r in sweep.runs]
    (root,) = write_planted(sweep, tmp_path / "multirun")
    want = {}
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        level = (np.arange(100) >= (30 if run_dir.name.startswith("a") else 70)).astype(float)
        write_text(run_dir / "metrics.csv", pd.DataFrame({"step": range(100), "curriculum/level": level})
                   .to_csv(index=False))
        want[run_dir.name] = level[50:].mean()
    assert main([str(root), "--out", str(tmp_path / "report"), "--no-plots", "--quiet", "--resamples", "200"]) == 0
    table = pd.read_csv(tmp_path / "report" / "mechanisms.csv")
    got = dict(zip(table["run"].astype(str), table["level_q2"]))
    assert got == pytest.approx(want) and set(got) == set(want)
    assert list(table["flips"]) == pytest.approx([1 / 99] * len(table))
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Mechanisms" in report and "`level_q2` = `mean:curriculum/level@50:`" in report


def test_the_report_lists_the_mechanisms_todays_preset_stands_in_for(tmp_path, monkeypatch):
    """Runs whose study block predates `mechanisms:`: today's preset of the study's name declares them,
    mechanisms.csv holds them, and report.md's section lists them with the note that the preset stood in."""
    import ablate.config
    from ablate.rundir.atomic import write_text
    from ablate.stats.__main__ import main
    from ablate.studies.calibrate import Setting, _difficulty, plant, write_planted

    sweep = plant(Setting(3, 3, "large", 0.0, (3,)), np.random.default_rng(2), _difficulty())
    assert all("mechanisms" not in r.config["study"] for r in sweep.runs)
    (root,) = write_planted(sweep, tmp_path / "multirun")
    for run_dir in (p for p in root.iterdir() if p.is_dir()):
        write_text(run_dir / "metrics.csv", pd.DataFrame({"step": range(10), "curriculum/level": [0.0] * 5 + [2.0] * 5})
                   .to_csv(index=False))
    conf = tmp_path / "conf"
    write_text(conf / "experiment" / f"{sweep.runs[0].config['study']['name']}.yaml",
               "study:\n  mechanisms:\n    level_late: \"mean:curriculum/level@5:\"\n")
    monkeypatch.setattr(ablate.config, "CONF_DIR", conf)
    assert main([str(root), "--out", str(tmp_path / "report"), "--no-plots", "--quiet", "--resamples", "200"]) == 0
    table = pd.read_csv(tmp_path / "report" / "mechanisms.csv")
    assert list(table["level_late"]) == pytest.approx([2.0] * len(table)) and len(table) == len(sweep.runs)
    report = (tmp_path / "report" / "report.md").read_text()
    section = report[report.index("## Mechanisms"):report.index("\n## ", report.index("## Mechanisms") + 1)]
    assert "`level_late` = `mean:curriculum/level@5:`" in section and "2 [2, 2]" in section
    assert "Declared by today's preset" in section and "declares today (level_late)" in section


# The retired per-study mechanisms scripts wrote these columns (4 decimals) from every run's metrics.csv;
# where a committed report carries its runs (runs.jsonl.gz), the preset's declared mechanism of the same
# name (or of its new name: RENAMED) must give the same value. The script's step_s left validation time out
# (the declared step_s is the slope of time/elapsed_s, validation in); columns the grammar cannot state (the
# reference and refill shares, reach) are described in committed.yaml.
RENAMED = {"peak_no_answer_after_switch": "no_answer_max_after_switch", "final_val_pass@1": "final_val"}
REDEFINED = {"step_s"}
SCRIPT_WRITTEN = [("curriculum_study/look4", 4), ("curriculum_ladder_study_rerun", 5), ("dots_replay_study", 7),
                  ("dots_replay_study/look3", 7), ("tool_annealing_mixed_study_rerun", 6)]


@pytest.mark.parametrize("report, n_columns", SCRIPT_WRITTEN)
def test_declared_mechanisms_reproduce_the_retired_scripts_columns(report, n_columns):
    import yaml

    from ablate.config import CONF_DIR
    from ablate.stats.read.load import load_sweep
    from ablate.stats.values.table import curve_value

    path = Path(__file__).resolve().parent.parent / "docs" / "findings" / report
    study = report.split("/")[0].removesuffix("_rerun")
    declared = yaml.safe_load((CONF_DIR / "experiment" / f"{study}.yaml").read_text())["study"]["mechanisms"]
    written = pd.read_csv(path / "mechanisms.csv", dtype={"run": str}).set_index("run")
    columns = {c: declared.get(c, declared.get(RENAMED.get(c, c))) for c in written.columns}
    columns = {c: metric for c, metric in columns.items() if metric is not None and c not in REDEFINED}
    assert len(columns) == n_columns, sorted(columns)
    runs = {r.rel: r for r in load_sweep([path]).runs if r.metrics is not None}
    assert len(runs) == len(written)
    for rel, row in written.iterrows():
        run = runs.get(rel) or runs[rel.split("/")[-1]]  # one archived sweep: runs are named by job
        for column, metric in columns.items():
            new = curve_value(run.metrics, metric)
            assert (np.isnan(new) and pd.isna(row[column])) or abs(new - row[column]) <= 5.001e-5, (rel, column)
