"""ablate.stats end to end on synthetic sweeps: discovery, grouping, known answers, bad input, CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ablate.stats import Settings, analyze, choose_baseline, load_sweep, newest_sweep
from ablate.stats.__main__ import main
from ablate.stats.read.runs import StatsInputError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # works whether or not tests/ is a package
from stats_fixtures import RunSpec, make_prompts, write_run, write_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAST = Settings(resamples=1000)


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "ablate.stats", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    """curriculum=none at 0.2 vs curriculum=static at 0.5: 3 seeds x 200 prompts x 16 samples."""
    return write_sweep(tmp_path_factory.mktemp("planted") / "planted", {"none": 0.2, "static": 0.5})


@pytest.fixture(scope="module")
def planted_analysis(planted):
    return analyze(load_sweep(planted), FAST)


# ------------------------------------------------------------------------------ discovery


def test_discovery_both_layouts_and_newest(tmp_path):
    rng = np.random.default_rng(0)
    dated = tmp_path / "multirun" / "2025-01-01" / "12-00-00"
    flat = tmp_path / "multirun" / "curriculum"
    for root in (dated, flat):
        for job, seed in enumerate((0, 1)):
            write_run(root / str(job), RunSpec([f"seed={seed}", "curriculum=static"]), rng, n_prompts=20)
    os.utime(dated, (1_000, 1_000))
    os.utime(flat, (2_000, 2_000))
    assert newest_sweep(tmp_path / "multirun") == flat
    os.utime(dated, (3_000, 3_000))
    assert newest_sweep(tmp_path / "multirun") == dated
    sweep = load_sweep(dated)
    assert [r.rel for r in sweep.runs] == ["0", "1"] and sweep.name == "12-00-00"
    with pytest.raises(StatsInputError, match="does not exist"):
        newest_sweep(tmp_path / "nope")


def test_conditions_ignore_override_order_and_prefixes(tmp_path):
    rng = np.random.default_rng(1)
    write_run(tmp_path / "a", RunSpec(["seed=0", "curriculum=static", "+lr=1e-5"]), rng, n_prompts=20)
    write_run(tmp_path / "b", RunSpec(["curriculum=static", "lr=1e-5", "seed=1"]), rng, n_prompts=20)
    write_run(tmp_path / "c", RunSpec(["curriculum=none", "lr=1e-5"]), rng, n_prompts=20)  # seed from config
    sweep = load_sweep(tmp_path)
    conds = sweep.conditions()
    assert list(conds) == [("curriculum=none", "lr=1e-5"), ("curriculum=static", "lr=1e-5")]
    assert [r.seed for r in conds[("curriculum=static", "lr=1e-5")]] == ["0", "1"]
    assert conds[("curriculum=none", "lr=1e-5")][0].seed == "0"
    a = analyze(sweep, FAST)
    assert a.conditions.common == ["lr=1e-5"]
    assert set(a.conditions.labels.values()) == {"curriculum=none", "curriculum=static"}
    assert a.conditions.labels[a.conditions.baseline] == "curriculum=none"


def test_default_baseline_rule():
    labels: dict = {}
    assert choose_baseline([(), ("curriculum=static",)], None, labels)[0] == ()
    cond = [("tool=anneal_linear",), ("tool=off",), ("tool=on",)]
    assert choose_baseline(cond, None, labels)[0] == ("tool=off",)
    cond = [("lr=1",), ("lr=2",)]
    base, rule = choose_baseline(cond, None, labels)
    assert base == ("lr=1",) and "sorted order" in rule
    assert choose_baseline(cond, "lr=2", labels)[0] == ("lr=2",)
    with pytest.raises(StatsInputError, match="matches no condition"):
        choose_baseline(cond, "lr=3", labels)
    with pytest.raises(StatsInputError, match="key=value"):
        choose_baseline(cond, "lr", labels)


# ------------------------------------------------------------------------------ numbers


def test_recomputed_metrics_agree_with_the_runs_summaries(tmp_path):
    rng = np.random.default_rng(2)
    for job, seed in enumerate((0, 1, 2)):
        write_run(tmp_path / str(job), RunSpec(["tool=on", f"seed={seed}"], p=0.4, tool=True,
                                               regimes=("no_tool", "tool")), rng, n_prompts=60)
    a = analyze(load_sweep(tmp_path), FAST)
    assert not [p for p in a.problems if "recomputed" in p], a.problems
    runs = a.summary.table[a.summary.table["level"] == "run"]
    checked = runs[np.isfinite(runs["reported"]) & ~runs["ci_method"].str.startswith("reported")]
    assert {"pass@1", "pass@16", "pass^1", "pass^4", "by_operands/3/pass^2", "exact_pass@1", "coverage", "precision",
            "mixed_fraction", "best_of_n",
            "verdict_rate/no_answer", "by_operands/3/pass@1", "by_operands/4/pass@16", "by_operands/4/precision",
            "tool/calls_per_rollout", "mean_response_length"} <= set(checked["metric"])
    # nothing eval.summarize writes is left unchecked except the tool error count
    reported_only = set(runs[runs["ci_method"].str.startswith("reported")]["metric"])
    assert reported_only == {"tool/tool_errors"}
    np.testing.assert_allclose(checked["value"], checked["reported"], atol=1e-9)
    # Wilson intervals use the sample counts behind each rate
    from statsmodels.stats.proportion import proportion_confint

    run0 = runs[(runs["run"] == "0") & (runs["regime"] == "tool")].set_index("metric")
    recs = [json.loads(line) for line in (tmp_path / "0" / "eval" / "tool" / "samples.jsonl").read_text().splitlines()]
    c, n, ans = (sum(r[k] for r in recs) for k in ("n_correct", "n", "n_answered"))
    for metric, (x, m) in {"pass@1": (c, n), "exact_pass@1": (c, n), "precision": (c, ans)}.items():
        assert tuple(run0.loc[metric, ["wilson_low", "wilson_high"]]) == pytest.approx(
            proportion_confint(x, m, method="wilson"))
    assert np.isnan(run0.loc["pass@4", "wilson_low"])
    cond = a.summary.table[a.summary.table["level"] == "condition"].set_index(["regime", "metric"])
    for regime in ("no_tool", "tool"):
        per_run = runs[(runs["regime"] == regime) & (runs["metric"] == "pass@1")]["value"]
        assert cond.loc[(regime, "pass@1"), "value"] == pytest.approx(per_run.mean())
        lo, hi = cond.loc[(regime, "pass@1"), ["ci_low", "ci_high"]]
        assert lo < per_run.mean() < hi
        # summary-only numbers are carried per seed with a t interval
        assert cond.loc[(regime, "tool/tool_errors"), "ci_method"] == "t interval over seeds"
        assert cond.loc[(regime, "tool/tool_errors"), "n_seeds"] == 3
    # a summary that disagrees with its samples is named
    d = tmp_path / "0" / "eval" / "tool" / "summary.json"
    summ = json.loads(d.read_text())
    summ["pass@1"] += 0.1
    d.write_text(json.dumps(summ))
    a = analyze(load_sweep(tmp_path), FAST)
    assert any(p.startswith("0 [tool]: pass@1 recomputed") for p in a.problems)


def test_agrees_with_the_evaluation_module(tmp_path):
    """Numbers recomputed from samples.jsonl match what ablate.eval.summarize writes."""
    summarize = pytest.importorskip("ablate.eval").summarize
    rng = np.random.default_rng(6)
    for job, seed in enumerate((0, 1)):
        records = make_prompts(rng, 0.45, n_prompts=80, difficulty=rng.normal(0, 1, 80))
        write_run(tmp_path / str(job), RunSpec(["x=1", f"seed={seed}"]), rng, records_by_regime={"default": records})
        summary = {"regime": "default", **summarize(records, [1, 2, 4, 8, 16])}
        (tmp_path / str(job) / "eval" / "default" / "summary.json").write_text(json.dumps(summary))
    a = analyze(load_sweep(tmp_path), FAST)
    assert not a.problems, a.problems
    runs = a.summary.table[a.summary.table["level"] == "run"]
    compared = runs[np.isfinite(runs["reported"])]
    assert {"pass@16", "pass^16", "exact_pass@1", "mixed_fraction", "by_operands/4/coverage",
            "by_operands/4/pass^2"} <= set(compared["metric"])
    np.testing.assert_allclose(compared["value"], compared["reported"], atol=1e-9)
    assert not runs["ci_method"].str.startswith("reported").any()


def test_identical_conditions_are_not_significant(tmp_path):
    sweep = write_sweep(tmp_path / "same", {"none": 0.4, "static": 0.4}, identical=True, tool=True)
    a = analyze(load_sweep(sweep), Settings(resamples=1000, metrics=("pass@1", "tool/tool_errors")))
    summary_only = a.comparisons.table[a.comparisons.table["metric"] == "tool/tool_errors"].iloc[0]
    assert "seed-level test only" in summary_only["note"] and np.isnan(summary_only["p_paired"])
    assert summary_only["p_seed"] == 1.0
    (row,) = a.comparisons.table[a.comparisons.table["metric"] == "pass@1"].to_dict("records")
    assert row["diff"] == 0.0 and row["p_paired"] == 1.0 and row["p_seed"] == 1.0
    assert row["significant_paired"] is False and row["significant_seed"] is False
    assert row["verdict"] == "not significant across seeds (Welch) at α=0.05 after Holm correction over this table"
    assert row["diff_ci_low"] < 0 < row["diff_ci_high"]
    assert row["poi"] == 0.5


def test_same_distribution_different_draws_is_not_significant(tmp_path):
    sweep = write_sweep(tmp_path / "null", {"a": 0.4, "b": 0.4, "c": 0.4}, seed=3)
    a = analyze(load_sweep(sweep), Settings(resamples=2000, metrics=("pass@1", "exact_pass@1", "best_of_n")))
    assert len(a.comparisons.table) == 6
    assert a.comparisons.table["p_paired"].notna().all()

    assert not a.comparisons.table["significant_paired"].astype(bool).any()
    assert not a.comparisons.table["significant_seed"].astype(bool).any()


def test_planted_difference_is_significant(planted_analysis):
    a = planted_analysis
    assert a.conditions.labels[a.conditions.baseline] == "curriculum=none"
    (row,) = a.comparisons.table.to_dict("records")
    assert row["condition"] == "curriculum=static" and row["n_shared_prompts"] == 200
    assert 0.2 < row["diff_ci_low"] < row["diff"] < row["diff_ci_high"]
    assert row["p_paired_holm"] <= 2 / 1001 and row["p_seed_holm"] < 0.01  # the smallest p 1000 permutations give
    assert row["significant_paired"] is True and row["significant_seed"] is True
    assert row["poi"] == 1.0
    assert row["verdict"] == "higher; significant across seeds (Welch) at α=0.05 after Holm correction over this table"
    # the difference's interval is Welch's over per-seed values, the same test as p_seed
    x = a.summary.groups[(a.conditions.baseline, row["regime"])]
    assert row["diff_ci_low"] > 0 and row["p_seed"] < 0.05 and x.run_values.shape[0] == 3


def test_iqm_over_runs_is_reported_without_moving_any_other_number(planted, planted_analysis):
    import scipy.stats

    a = planted_analysis
    robust = a.summary.robust.set_index("condition")
    runs = a.summary.table[(a.summary.table["level"] == "run") & (a.summary.table["metric"] == "pass@1")]
    for label in ("curriculum=none", "curriculum=static"):
        values = runs[runs["condition"] == label]["value"].to_numpy()
        assert robust.loc[label, "iqm"] == pytest.approx(scipy.stats.trim_mean(values, 0.25))
        assert robust.loc[label, "mean"] == pytest.approx(values.mean()) and robust.loc[label, "n_runs"] == 3
        assert robust.loc[label, "iqm_ci_low"] <= robust.loc[label, "iqm"] <= robust.loc[label, "iqm_ci_high"]
    # pass^k is a metric like any other, and asking for it changes nothing that was there before
    b = analyze(load_sweep(planted), dataclasses.replace(FAST, metrics=["pass@1", "pass^4"]))
    assert set(b.comparisons.table["metric"]) == {"pass@1", "pass^4"}
    assert set(b.summary.robust["metric"]) == {"pass@1", "pass^4"}
    pd.testing.assert_frame_equal(a.summary.table, b.summary.table)
    old = b.comparisons.table[b.comparisons.table["metric"] == "pass@1"].reset_index(drop=True)
    for column in ("diff", "diff_ci_low", "diff_ci_high", "paired_diff", "p_paired", "p_seed", "poi"):
        assert old[column].tolist() == a.comparisons.table[column].tolist(), column


def test_analysis_is_reproducible(planted):
    a = analyze(load_sweep(planted), FAST)
    b = analyze(load_sweep(planted), FAST)
    pd.testing.assert_frame_equal(a.summary.table, b.summary.table)
    pd.testing.assert_frame_equal(a.comparisons.table, b.comparisons.table)


def test_headline_columns_equal_in_every_run_share_one_column(planted_analysis):
    from ablate.stats.render.markdown import headline_metrics, render_markdown, same_columns

    a = planted_analysis
    table = a.summary.table
    columns = same_columns(table, "default", headline_metrics(table, a.conditions.settings.metrics, "default"))
    # exact_pass@1 is pass@1 run for run here; precision differs wherever an answer is missing
    assert columns["pass@1"] == ["exact_pass@1"] and "exact_pass@1" not in columns and "precision" in columns
    runs = table[(table["level"] == "run") & (table["regime"] == "default")].set_index(["run", "metric"])
    assert (runs.xs("pass@1", level="metric")["value"] == runs.xs("exact_pass@1", level="metric")["value"]).all()
    assert not (runs.xs("pass@1", level="metric")["value"] == runs.xs("precision", level="metric")["value"]).all()
    assert "| pass@1 = exact_pass@1 |" in render_markdown(a, [])


def test_curves_and_steps_to_reach(planted_analysis, planted):
    a = planted_analysis
    reward = a.curves.table[a.curves.table["metric"] == "train/reward_mean"]
    assert set(reward["condition"]) == {"curriculum=none", "curriculum=static"}
    assert reward["n_seeds"].max() == 3 and (reward["ci_low"] <= reward["mean"]).all()
    val = a.curves.table[a.curves.table["metric"] == "val/score"]
    assert sorted(set(val["step"])) == [9, 19, 29, 39]  # sparse rows kept at their own steps
    reach = a.curves.reach[a.curves.reach["level"] == "condition"].set_index("condition")
    assert reach.loc["curriculum=static", "reached"] == 3  # static reaches the baseline's final reward
    assert reach.loc["curriculum=static", "step"] < 20
    custom = analyze(load_sweep(planted), Settings(resamples=200, reach=["train/loss<=0.1"]))
    row = custom.curves.reach[custom.curves.reach["level"] == "condition"].iloc[0]
    assert row["op"] == "<=" and row["threshold"] == 0.1 and row["reached"] == 3


def test_figures_draw_what_the_analysis_computed_and_resample_nothing(planted_analysis, tmp_path, monkeypatch):
    import ablate.stats.maths.intervals as intervals
    import ablate.stats.maths.paired as paired
    from ablate.stats.render.figures import make_figures

    a = planted_analysis
    profiles = a.summary.profiles[a.summary.profiles["metric"] == "pass@1"]
    assert set(profiles["condition"]) == {"curriculum=none", "curriculum=static"} and set(profiles["n_runs"]) == {3}
    for _, p in profiles.groupby("condition"):  # all runs above the grid's floor, none above its top
        assert p["fraction"].iloc[0] == 1.0 and p["fraction"].iloc[-1] == 0.0
        assert (p["low"] <= p["fraction"] + 1e-12).all() and (p["fraction"] <= p["high"] + 1e-12).all()

    def no_resampling(*args, **kwargs):
        raise AssertionError("a figure resampled")

    for name in ("performance_profile", "rng_for", "iqm_ci", "ratio_bootstrap_ci", "t_interval"):
        monkeypatch.setattr(intervals, name, no_resampling)
    monkeypatch.setattr(paired, "paired_test", no_resampling)
    drawn = make_figures(tmp_path, a.conditions, a.summary, a.comparisons, a.curves, a.claims)
    names = [name for _, name in drawn]
    assert "profile_default.png" in names and (tmp_path / "profile_default.png").is_file()


def test_curve_panels_that_do_not_move_are_dropped_unless_a_claim_reads_them_and_twins_share_one():
    from ablate.stats.render.figures import claimed_columns, curve_order

    steps = np.arange(10)
    series = {"train/loss": 2.0 - 0.1 * steps,                     # moves: kept
              "val/coverage": 1.0 - 0.003 * (steps % 2),             # a rate within 0.3 points of 1: flat
              "val/pass@1": 0.30 + 0.01 * steps,                     # moves: kept, val/ before training
              "train/response_length": 32.2 + 0.05 * (steps % 2),    # 0.15% of its size: flat
              "val/no_answer_rate": np.zeros(10),                    # constant, but a claim reads it
              "val/exact_pass@1": 0.30 + 0.01 * steps}               # val/pass@1's curve: one panel
    curves = pd.DataFrame([{"metric": m, "condition": "a", "step": int(s), "mean": float(v)}
                           for m, vals in series.items() for s, v in zip(steps, vals)])
    claimed = claimed_columns(pd.DataFrame({"metric": ["max:val/no_answer_rate@50:99"]}))
    assert claimed == ["val/no_answer_rate"]
    panels = curve_order(curves, list(series), claimed)
    assert list(panels) == ["val/no_answer_rate", "val/pass@1", "train/loss"]
    assert panels["val/pass@1"] == ["val/exact_pass@1"] and panels["train/loss"] == []
    assert list(curve_order(curves, list(series))) == ["val/pass@1", "train/loss"]  # no claims
    curves.loc[(curves["metric"] == "val/exact_pass@1") & (curves["step"] == 9), "mean"] -= 0.01
    assert list(curve_order(curves, list(series))) == ["val/pass@1", "val/exact_pass@1", "train/loss"]


# ------------------------------------------------------------------------------ bad input


def test_half_written_sweep_lists_every_run_and_reports_the_rest(tmp_path):
    rng = np.random.default_rng(4)
    root = tmp_path / "half"
    specs = [
        RunSpec(["curriculum=none", "seed=0"], 0.3),
        RunSpec(["curriculum=none", "seed=1"], 0.3, corrupt_line=True),
        RunSpec(["curriculum=none", "seed=2"], 0.3, state="failed"),
        RunSpec(["curriculum=static", "seed=0"], 0.5),
        RunSpec(["curriculum=static", "seed=1"], 0.5, state="running"),
        RunSpec(["curriculum=static", "seed=2"], 0.5, with_eval=False),
    ]
    for job, spec in enumerate(specs):
        write_run(root / str(job), spec, rng, n_prompts=50)
    (root / "6").mkdir()
    (root / "6" / ".hydra").mkdir()
    (root / "6" / ".hydra" / "overrides.yaml").write_text("[curriculum=static, seed=3]\n")  # nothing else

    out = tmp_path / "report"
    assert main([str(root), "--out", str(out), "--resamples", "500", "--quiet"]) == 0
    inv = pd.read_csv(out / "runs.csv").set_index("run")
    assert inv.loc[2, "outcome"] == "failed" and "CUDA out of memory" in inv.loc[2, "reason"]
    assert inv.loc[4, "outcome"] == "running" and "still running" in inv.loc[4, "reason"]
    assert inv.loc[5, "outcome"] == "missing" and inv.loc[5, "reason"] == "no eval/ directory"
    assert inv.loc[6, "outcome"] == "missing"
    assert inv.loc[1, "outcome"] == "ok"
    report = (out / "report.md").read_text()
    for job in (2, 4, 5, 6):
        assert str(root / str(job)) in report
    assert "4 run(s) not included" in report
    assert "1/samples.jsonl" not in report or "line 4 (invalid JSON)" in report
    assert "skipped 1 bad line(s): line 4 (invalid JSON)" in report
    summary = pd.read_csv(out / "summary.csv")
    cond = summary[(summary["level"] == "condition") & (summary["metric"] == "pass@1")].set_index("condition")
    assert cond.loc["curriculum=none", "n_seeds"] == 2 and cond.loc["curriculum=static", "n_seeds"] == 1
    counts = pd.read_csv(out / "runs.csv")
    assert len(counts) == 7
    comparisons = pd.read_csv(out / "comparisons.csv")
    assert len(comparisons) == 1 and "needs >= 2 seeds" in comparisons.loc[0, "note"]


def test_never_started_jobs_from_multirun_yaml(tmp_path):
    sweep = write_sweep(tmp_path / "s", {"none": 0.3, "static": 0.5}, seeds=(0, 1), n_prompts=30)
    shutil.rmtree(sweep / "3")  # static, seed 1
    a = analyze(load_sweep(sweep), FAST)
    missing = a.conditions.inventory[a.conditions.inventory["state"] == "never started"]
    assert len(missing) == 1 and missing.iloc[0]["seed"] == "1"
    assert "curriculum=static seed=1" in missing.iloc[0]["reason"]
    counts = a.conditions.table.set_index("condition")
    assert counts.loc["curriculum=static", "missing"] == 1 and counts.loc["curriculum=static", "ok"] == 1


def test_never_started_jobs_of_a_study_grid(tmp_path):
    """A study's sweep is range() seeds over a union of grids: the sweeper's own expansion tells."""
    sweep = write_sweep(tmp_path / "s", {"none": 0.3, "static": 0.5, "frontier": 0.4}, seeds=(0, 1, 2),
                        n_prompts=30, multirun_yaml=False)
    sweeper = {"params": {"seed": "range(3)"}, "grids": [{"curriculum": "none,static"}, {"curriculum": "frontier"}]}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper, "overrides": {"task": []}}}))
    assert not load_sweep(sweep).never_started  # all 9 jobs ran
    shutil.rmtree(sweep / "8")  # frontier, seed 2
    missing = analyze(load_sweep(sweep), FAST).conditions.inventory.query("state == 'never started'")
    assert missing[["condition", "seed"]].values.tolist() == [["curriculum=frontier", "2"]]
    # a grid the sweeper cannot expand is a warning, not a crash
    sweeper["params"] = {"seed": "range(oops"}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper, "overrides": {"task": []}}}))
    loaded = load_sweep(sweep)
    assert not loaded.never_started and any("does not expand" in w for w in loaded.warnings)


def test_a_damaged_or_missing_multirun_yaml_is_named_and_the_jobs_it_lists_checked(tmp_path):
    sweep = write_sweep(tmp_path / "s", {"none": 0.3, "static": 0.5}, seeds=(0, 1), n_prompts=30)
    record = sweep / "multirun.yaml"
    text = record.read_text()
    assert not load_sweep(sweep).warnings  # whole: nothing said
    record.write_text(text[:text.index("- seed=")])  # cut short: it lists the conditions, not the seeds
    loaded = load_sweep(sweep)
    assert any(str(record) in w and "lists 2 job(s), not the 4 run(s) here" in w for w in loaded.warnings)
    record.write_text("hydra:\n  overrides: cut")
    assert [w for w in load_sweep(sweep).warnings if "not the record Hydra writes" in w]
    record.unlink()  # without it, nothing tells a sweep launched the runs here: nothing to say
    assert not load_sweep(sweep).warnings
    (sweep / "0" / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    assert [w for w in load_sweep(sweep).warnings if f"{sweep}/multirun.yaml: missing, though its runs" in w]


def test_hydra_escaped_overrides_match_multirun_yaml():
    from ablate.stats.read.runs import normalise_override

    # A job's overrides.yaml says `builtin\:tiny-sft` where multirun.yaml says `builtin:tiny-sft`.
    assert normalise_override(r"model_dir=builtin\:tiny-sft") == normalise_override("model_dir=builtin:tiny-sft")
    assert normalise_override("+a = b") == "a=b"


def test_conditions_without_shared_prompts(tmp_path):
    rng = np.random.default_rng(5)
    for job, (cond, seed) in enumerate([("a", 0), ("a", 1), ("b", 0), ("b", 1)]):
        ids = [f"{cond}{i}" for i in range(40)]
        write_run(tmp_path / str(job), RunSpec([f"data={cond}", f"seed={seed}"], ids=ids), rng)
    a = analyze(load_sweep(tmp_path), FAST)
    (row,) = a.comparisons.table.to_dict("records")
    assert row["n_shared_prompts"] == 0 and np.isnan(row["p_paired"])
    assert "no shared prompt ids" in row["note"]
    assert any("share no test prompt ids" in p for p in a.problems)
    assert np.isfinite(row["diff"]) and np.isfinite(row["p_seed"])


def test_bad_options_exit_2_without_traceback(planted, tmp_path, capsys):
    assert main([str(planted), "--out", str(tmp_path / "x"), "--baseline", "curriculum=nope"]) == 2
    err = capsys.readouterr().err
    assert "matches no condition" in err and "curriculum=static" in err
    assert main([str(planted), "--out", str(tmp_path / "x"), "--metric", "pass@99"]) == 2
    assert "pass@99" in capsys.readouterr().err
    assert main([str(planted), "--reach", "train/loss~3"]) == 2
    with pytest.raises(SystemExit) as exc:
        main([str(planted), "--confidence", "2"])
    assert exc.value.code == 2


def test_cli_nonexistent_and_empty_paths(tmp_path):
    res = run_cli(str(tmp_path / "no_such_sweep"))
    assert res.returncode == 2
    assert "no_such_sweep" in res.stderr and "Traceback" not in res.stderr + res.stdout
    (tmp_path / "empty").mkdir()
    res = run_cli(str(tmp_path / "empty"))
    assert res.returncode == 1
    assert "no runs found" in res.stderr and "Traceback" not in res.stderr + res.stdout
    res = run_cli(cwd=tmp_path)  # no ./multirun/
    assert res.returncode == 2 and "multirun" in res.stderr and "Traceback" not in res.stderr


# ------------------------------------------------------------------------------ writing


class _HalfWriter:
    """A file whose first write puts half its data down, then fails as a full disk does."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_an_interrupted_write_leaves_the_previous_file_whole(planted_analysis, tmp_path, monkeypatch):
    """Each file of the report (findings and a later `ablate.stats` read them) is written atomically: a
    write that dies half-way leaves the previous file as it was and nothing half-written under its name."""
    from ablate.rundir import atomic
    from ablate.stats.render.report import write_report

    out = tmp_path / "report"
    names = sorted(write_report(planted_analysis, out, formats=("md", "json"), plots=False))
    assert {"report.md", "report.json", "summary.csv", "curves.csv.gz", "prompts.csv.gz"} <= set(names)
    real_open = open
    for name in names:
        for n in names:
            (out / n).write_bytes(b"the previous report's " + n.encode())

        def failing_open(path, mode="r", _name=name, **kw):
            f = real_open(path, mode, **kw)
            return _HalfWriter(f) if Path(path).name.startswith(_name + atomic.TMP_MARK) else f

        monkeypatch.setattr(atomic, "open", failing_open, raising=False)
        with pytest.raises(OSError, match="No space left"):
            write_report(planted_analysis, out, formats=("md", "json"), plots=False)
        monkeypatch.undo()
        assert (out / name).read_bytes() == b"the previous report's " + name.encode(), name
        assert not [p.name for p in out.iterdir() if atomic.TMP_MARK in p.name], name


# ------------------------------------------------------------------------------ CLI


def test_cli_end_to_end(planted, tmp_path):
    out = tmp_path / "stats"
    res = run_cli(str(planted), "--out", str(out), "--resamples", "2000")
    assert res.returncode == 0, res.stderr
    assert "Report:" in res.stdout and "report.md" in res.stdout
    for name in ("report.md", "summary.csv", "comparisons.csv", "runs.csv", "curves.csv.gz", "reach.csv",
                 "passk_default.png", "operands_default.png", "differences_default.png", "curves.png",
                 "robust.csv", "profile_default.png"):
        assert (out / name).is_file(), name
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert report.index("## Runs") < report.index("## Results") < report.index("## Comparisons")
    assert "](passk_default.png)" in report and "](curves.png)" in report and "](profile_default.png)" in report
    assert report.index("## Comparisons") < report.index("## Robust aggregates across runs")
    assert "significant across seeds (Welch) at α=0.05 after Holm correction" in report
    comparisons = pd.read_csv(out / "comparisons.csv")
    assert comparisons.loc[0, "p_paired_holm"] < 0.05
    assert not (out / "report.json").exists()


def test_cli_json_and_default_paths(planted, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    shutil.copytree(planted, work / "multirun" / "2025-01-01" / "10-00-00")
    monkeypatch.chdir(work)
    assert main(["--format", "json", "--resamples", "500", "--no-plots"]) == 0
    out = work / "stats" / "10-00-00"
    assert "report.json" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    assert {"summary", "comparisons", "runs", "conditions", "curves", "reach", "baseline", "settings",
            "problems"} <= set(data)
    assert data["baseline"]["condition"] == "curriculum=none"
    assert len(data["summary"]) == len(pd.read_csv(out / "summary.csv"))
    assert data["comparisons"][0]["significant_paired"] is True
    assert not (out / "report.md").exists() and not list(out.glob("*.png"))
    assert main(["--format", "both", "--resamples", "200", "--no-plots", "--out", "both"]) == 0
    assert (work / "both" / "report.md").is_file() and (work / "both" / "report.json").is_file()


def test_runs_that_name_one_upstream_but_got_other_weights_are_a_data_problem(tmp_path):
    """A later look whose upstream SFT was re-trained elsewhere (same cache key, other weights)
    is not more seeds of the first look's recipe: the report says so instead of pooling silently."""
    sweep = write_sweep(tmp_path / "sweep", {"none": 0.3, "static": 0.3}, seeds=(0, 1))
    for n, status_path in enumerate(sorted(sweep.glob("*/status.json"))):
        status = json.loads(status_path.read_text())
        # the same key under two machines' cache roots; the last job got other weights
        root = "/root/.cache" if n % 2 else "/home/u/.cache"
        status.update(init=f"{root}/ablate/models/sft-3d7af0517ca39e43/model",
                      init_sha256="b" * 64 if n == 3 else "a" * 64)
        status_path.write_text(json.dumps(status))
    problems = analyze(load_sweep(sweep), FAST).problems
    mixed = [p for p in problems if "different weights" in p]
    assert len(mixed) == 1 and "sft-3d7af0517ca39e43/model" in mixed[0] and "bbbbbbbbbbbb: 3" in mixed[0]
    status_path = sorted(sweep.glob("*/status.json"))[3]
    status = json.loads(status_path.read_text())
    status_path.write_text(json.dumps({**status, "init_sha256": "a" * 64}))
    assert not [p for p in analyze(load_sweep(sweep), FAST).problems if "different weights" in p]


def _ran_on(sweep: Path, accelerator: str, torch: str) -> None:
    for job in sweep.glob("[0-9]*"):
        config = yaml.safe_load((job / ".hydra/config.yaml").read_text())
        config["trainer"]["accelerator"] = accelerator
        (job / ".hydra/config.yaml").write_text(yaml.safe_dump(config))
        status = json.loads((job / "status.json").read_text())
        status["versions"] = {"torch": torch, "cpu_capability": "AVX2"}
        (job / "status.json").write_text(json.dumps(status))


def test_seeds_run_on_two_machines_pool_into_one_condition_and_the_report_names_the_machines(tmp_path):
    """Where a run ran (trainer.accelerator / devices / num_threads on the command line) is not its
    condition: seeds 0-1 on a GPU node and 2-3 on a CPU pool into one arm each, the header names both
    machines with their seeds, and a machine that ran more of one arm than another is a data problem."""
    gpu = write_sweep(tmp_path / "gpu", {"none": 0.3, "static": 0.4}, seeds=(0, 1),
                      extra=("trainer.accelerator=gpu", "trainer.num_threads=1"))
    _ran_on(gpu, "gpu", "2.11.0")
    cpu = write_sweep(tmp_path / "cpu", {"none": 0.3, "static": 0.4}, seeds=(2, 3), seed=1,
                      extra=("trainer.num_threads=1",))
    _ran_on(cpu, "auto", "2.13.0+cpu")
    analysis = analyze(load_sweep([gpu, cpu]), FAST)
    assert sorted(analysis.conditions.table["condition"]) == ["curriculum=none", "curriculum=static"]
    assert set(analysis.conditions.table["ok"]) == {4}
    assert not [p for p in analysis.problems if "machines" in p]
    out = tmp_path / "report"
    assert main([str(gpu), str(cpu), "--resamples", "200", "--no-plots", "--quiet", "--out", str(out)]) == 0
    header = (out / "report.md").read_text().split("## ")[0]
    assert "`gpu, torch 2.11.0`: 4 runs (seeds 0, 1)" in header
    assert "`auto, torch 2.13.0+cpu, AVX2`: 4 runs (seeds 2, 3)" in header
    shutil.rmtree(cpu / "0")  # the CPU ran one seed fewer of curriculum=none than of curriculum=static
    problems = analyze(load_sweep([gpu, cpu]), FAST).problems
    confounded = [p for p in problems if "confounded" in p]
    assert len(confounded) == 1 and "auto, torch 2.13.0+cpu, AVX2: 1-2 runs a condition" in confounded[0]
