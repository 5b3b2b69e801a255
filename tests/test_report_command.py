"""A report's command line is written relative to where `python -m ablate.stats` ran (issue 31): a
committed report must not carry the absolute paths of the machine that rendered it."""

import os

from stats_fixtures import write_sweep

from ablate.stats.__main__ import main, relative_path


def test_report_command_line_holds_paths_relative_to_the_working_directory(tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "multirun" / "sweep", {"none": 0.3, "static": 0.4}, seeds=(0, 1), n_prompts=20)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs" / "report"
    assert main([str(sweep), "--out", str(out), "--resamples", "100", "--no-plots", "--quiet"]) == 0
    (line,) = [s for s in (out / "report.md").read_text().splitlines() if s.startswith("Command:")]
    assert "`python -m ablate.stats multirun/sweep --out docs/report --resamples 100 --no-plots --quiet`" in line
    assert str(tmp_path) not in line


def test_relative_path_rewrites_only_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert relative_path(str(tmp_path / "a" / "b")) == os.path.join("a", "b")
    assert relative_path(f"--out={tmp_path / 'r'}") == "--out=r"
    assert relative_path("--name=IPO:stage.pairs.order=none") == "--name=IPO:stage.pairs.order=none"
    assert relative_path("multirun/x") == "multirun/x" and relative_path("--power") == "--power"
    assert relative_path(str(tmp_path.parent / "other")) == os.path.join("..", "other")  # outside: still relative
