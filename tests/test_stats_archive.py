"""A committed report directory is a sweep: `ablate.stats` re-reads it (runs.jsonl.gz + prompts.csv.gz)
to the same numbers, and pools it with a later look's run directories as if they were all on disk."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.stats.__main__ import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stats_fixtures import study_specs, write_conditions

ARGS = ["--no-plots", "--quiet", "--resamples", "200"]
TABLES = ["claims.csv", "claims_looks.csv", "summary.csv", "comparisons.csv", "curves.csv.gz", "reach.csv"]


def _report(paths, out: Path) -> Path:
    assert main([*map(str, paths), "--out", str(out), *ARGS]) == 0
    return out


def _same(a: Path, b: Path, tables=TABLES) -> None:
    assert {n for n in tables if (a / n).is_file()} == {n for n in tables if (b / n).is_file()}
    for name in (n for n in tables if (a / n).is_file()):
        left, right = pd.read_csv(a / name), pd.read_csv(b / name)
        pd.testing.assert_frame_equal(left, right, check_exact=True, obj=name)


def _planted_looks(tmp_path: Path):
    from ablate.studies.calibrate import Setting, _difficulty, plant, write_planted

    sweep = plant(Setting(6, 6, "large", 0.02, (3, 6)), np.random.default_rng(3), _difficulty())
    return write_planted(sweep, tmp_path / "multirun")  # look0 (seeds 0-2), look1 (seeds 3-5)


def test_a_report_read_back_from_its_archive_gives_every_table_bit_for_bit(tmp_path):
    specs = study_specs()  # rloo none/static/frontier with curves, and the tool-regime SFT pair
    sweep = write_conditions(tmp_path / "curriculum_study", specs[:3] + specs[5:], seeds=(0, 1, 2), n_prompts=40)
    first = _report([sweep], tmp_path / "first")
    assert (first / "runs.jsonl.gz").is_file() and (first / "prompts.csv.gz").is_file()
    shutil.rmtree(sweep)  # the run directories are gone: the committed report is all there is
    again = _report([first], tmp_path / "again")
    _same(first, again)
    runs = pd.read_csv(again / "runs.csv")
    assert len(runs) == 15 and set(runs["outcome"]) == {"ok"}


def test_a_later_look_pools_with_the_committed_first_look_as_with_its_run_directories(tmp_path):
    look0, look1 = _planted_looks(tmp_path)
    on_disk = _report([look0, look1], tmp_path / "on_disk")
    committed = _report([look0], tmp_path / "look1_report")
    shutil.rmtree(look0)
    pooled = _report([committed, look1], tmp_path / "pooled")
    _same(on_disk, pooled, ["claims.csv", "claims_looks.csv", "summary.csv", "comparisons.csv"])
    looks = pd.read_csv(pooled / "claims_looks.csv")
    assert list(looks["n"]) == [3, 6] and looks["planned"].all()  # two looks, both the plan's
    # the pooled report's archive keeps both sweep directories apart: read back, still two looks
    again = _report([pooled], tmp_path / "again")
    _same(pooled, again, ["claims.csv", "claims_looks.csv", "summary.csv"])


def test_the_archive_keeps_runs_that_did_not_finish_and_says_why(tmp_path):
    from ablate.stats import load_sweep

    sweep = write_conditions(tmp_path / "s", study_specs()[:2], seeds=(0, 1), n_prompts=30)
    status = sweep / "0" / "status.json"
    status.write_text(status.read_text().replace('"completed"', '"failed"'))
    report = _report([sweep], tmp_path / "r")
    runs = {r.rel: r for r in load_sweep(report).runs}
    assert runs["0"].outcome == "failed" and not runs["0"].ok and runs["1"].ok
    assert runs["1"].metrics is not None and runs["1"].metrics.index.name == "step"


def test_a_directory_with_an_archive_is_not_searched_for_run_directories(tmp_path):
    from ablate.stats import load_sweep

    sweep = write_conditions(tmp_path / "s", study_specs()[:1], seeds=(0,), n_prompts=30)
    report = _report([sweep], tmp_path / "r")
    shutil.copytree(sweep, report / "stray")  # a run directory under the report is not read twice
    assert len(load_sweep(report).runs) == 1


def test_next_look_continues_a_committed_report_into_multirun(tmp_path):
    from ablate.studies.next_look import commands

    look0, _ = _planted_looks(tmp_path)
    committed = _report([look0], tmp_path / "docs" / "findings" / "planted")
    shutil.rmtree(look0)
    (cmd,) = commands([committed])
    assert 'hydra.sweeper.params.seed="range(3,6)"' in cmd  # the plan's look 2 from 3 seeds per arm
    assert cmd[-1] == "hydra.sweep.dir=multirun/look0_look2"  # beside the sweeps, not in docs/


def test_a_look_run_over_sessions_is_held_unanalysed_then_pools_as_one_look(tmp_path):
    look0, look1 = _planted_looks(tmp_path)
    on_disk = _report([look0, look1], tmp_path / "on_disk")
    # look 1's runs split over two sessions: the first session's part is held, then its directories go
    parts = [tmp_path / "multirun" / f"study_look1_{i}" for i in (0, 1)]
    runs = sorted(p for p in look1.iterdir() if p.is_dir())
    for i, run in enumerate(runs):  # in order: a claim's interval resamples its seeds in the order it reads them
        shutil.move(str(run), str(parts[2 * i // len(runs)] / run.name))
    held = tmp_path / "held"
    assert main([str(parts[0]), "--hold", "--out", str(held), "--quiet"]) == 0
    assert sorted(p.name for p in held.iterdir()) == ["prompts.csv.gz", "runs.jsonl.gz"]  # no verdict, no table
    shutil.rmtree(parts[0])
    pooled = _report([look0, held, parts[1]], tmp_path / "pooled")
    _same(on_disk, pooled, ["claims.csv", "claims_looks.csv"])
    looks = pd.read_csv(pooled / "claims_looks.csv")
    assert list(looks["n"]) == [3, 6] and looks["planned"].all()  # the two parts are one look, not two


def test_hold_without_out_is_refused_before_any_run_is_read(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nowhere"), "--hold"])
    assert exc.value.code == 2 and "--hold needs --out" in capsys.readouterr().err


def test_next_look_finishes_a_look_held_part_way_before_deciding_anything(tmp_path):
    from ablate.studies.next_look import commands

    look0, look1 = _planted_looks(tmp_path)  # the plan looks at 3 and 6 seeds per arm
    part = tmp_path / "multirun" / "study_look1_3"
    part.mkdir()
    for name in ("a3", "b3"):  # one session finished seed 3 of both arms, then its machine went
        shutil.move(str(look1 / name), str(part / name))
    shutil.rmtree(look1)
    held = tmp_path / "held"
    assert main([str(part), "--hold", "--out", str(held), "--quiet"]) == 0
    shutil.rmtree(part)
    (cmd,) = commands([look0, held])
    assert 'hydra.sweeper.params.seed="range(4,6)"' in cmd  # the seeds look 2 still lacks, not a look 3
    assert cmd[-1] == f"hydra.sweep.dir={tmp_path / 'multirun' / 'study_look1_4'}"  # one more part of that look
    grids = next(c for c in cmd if c.startswith("hydra.sweeper.grids="))
    assert "arm:a" in grids and "arm:b" in grids
