"""ablate.stats on study sweeps: the study block (metrics, question, family baselines), run warnings,
steps to reach on held-out val/ metrics, and power planning (checked by simulation)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import yaml

from ablate.stats import Settings, analyze, load_sweep
from ablate.stats.__main__ import main
from ablate.stats.claims.study import lookup, matches, parse_study, same
from ablate.stats.maths.power import mdd, pooled_sd, power_line, seeds_needed, standard_mdd
from ablate.stats.read.runs import StatsInputError
from ablate.stats.stages.curves import TRAIN_CAVEAT

sys.path.insert(0, str(Path(__file__).resolve().parent))  # works whether or not tests/ is a package
from stats_fixtures import (  # noqa: E402
    CURRICULUM_STUDY, RunSpec, study_specs, write_conditions, write_sweep,
)

FAST = Settings(resamples=500)
RLOO_NONE, RLOO_STATIC, RLOO_FRONTIER = ("curriculum=none,stage=rloo", "curriculum=static,stage=rloo",
                                         "curriculum=frontier,stage=rloo")
IPO, IPO_STATIC = "stage=ipo", "curriculum=static,stage=ipo"
SFT_ON, SFT_OFF = "stage=sft,tool=on", "stage=sft,tool=off"


@pytest.fixture(scope="module")
def study_sweep(tmp_path_factory) -> Path:
    return write_conditions(tmp_path_factory.mktemp("study") / "curriculum_study", study_specs())


@pytest.fixture(scope="module")
def study_analysis(study_sweep):
    return analyze(load_sweep(study_sweep), FAST)


# ------------------------------------------------------------------------------ A: the study block


def test_rule_matching():
    cfg = yaml.safe_load("stage: {name: rloo}\ncurriculum: null\ntool: {name: 'on'}\nlr: 0.001\nflag: true\n")
    assert lookup(cfg, "stage.name") == "rloo" and matches(cfg, {"stage.name": "rloo"})
    assert matches(cfg, {"curriculum": None}) and matches(cfg, {"replay": None})  # null: null or missing
    assert not matches(cfg, {"curriculum.name": "none"}) and not matches(cfg, {"stage": None})
    # YAML 1.1 reads an unquoted `on` as True: a rule written either way matches the quoted config value
    assert matches(cfg, yaml.safe_load("{tool.name: on}")) and matches(cfg, {"tool.name": "on"})
    assert not matches(cfg, {"tool.name": "off"})
    assert same(1e-3, "0.001") and matches(cfg, {"lr": "1e-3", "flag": "yes"})
    assert not matches(None, {"stage.name": "rloo"})
    problems: list[str] = []
    study = parse_study({"name": "s", "effect": "big", "baselines": [{"family": {"a": 1}}, "junk"]}, problems)
    assert study.rules == [] and study.effect is None and len(problems) == 3


def test_study_answers_its_question_without_flags(study_analysis):
    a = study_analysis
    assert a.conditions.study.name == "curriculum_study"
    assert tuple(a.conditions.settings.metrics) == tuple(CURRICULUM_STUDY["metrics"])
    assert a.conditions.settings.effect == CURRICULUM_STUDY["effect"]
    cmp = a.comparisons.table
    pairs = set(zip(cmp["regime"], cmp["condition"], cmp["baseline"]))
    assert pairs == {
        ("default", RLOO_STATIC, RLOO_NONE), ("default", RLOO_FRONTIER, RLOO_NONE),  # rloo family
        ("default", IPO_STATIC, IPO),  # ipo: its baseline is the one with a null curriculum
        # sft's rule is for the tool regime only: elsewhere the global rule (first in sorted order)
        ("default", SFT_ON, RLOO_FRONTIER), ("default", SFT_OFF, RLOO_FRONTIER),
        ("tool", SFT_OFF, SFT_ON),
    }
    assert set(cmp["metric"]) == set(CURRICULUM_STUDY["metrics"]) and len(cmp) == 4 * 6
    families = {f["family"]: f["baseline"] for f in a.conditions.families}
    assert families == {"stage.name=rloo": RLOO_NONE, "stage.name=ipo": IPO,
                        "stage.name=sft [regime `tool`]": SFT_ON, "any other condition": RLOO_FRONTIER}
    assert {a.conditions.labels[b] for b in a.summary.baselines_in("tool")} == {SFT_ON}


def test_study_report_header_and_cli(study_sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(study_sweep), "--out", str(out), "--resamples", "300", "--no-plots", "--format", "both"]) == 0
    printed = capsys.readouterr().out
    assert "Study curriculum_study: Does a static" in printed
    report = (out / "report.md").read_text()
    head = report[:report.index("## Runs")]
    assert f"Study: **curriculum_study** — {CURRICULUM_STUDY['question']}" in head
    assert f"- stage.name=rloo → **{RLOO_NONE}**" in head
    assert f"- stage.name=sft [regime `tool`] → **{SFT_ON}**" in head
    assert f"| {IPO} (baseline) |" in report and f"| {RLOO_NONE} (baseline) |" in report
    cmp = pd.read_csv(out / "comparisons.csv")
    assert set(cmp["metric"]) == set(CURRICULUM_STUDY["metrics"])
    data = yaml.safe_load((out / "report.json").read_text())  # JSON is YAML
    assert data["study"]["name"] == "curriculum_study" and len(data["study"]["baselines"]) == 4
    # --baseline still overrides every family
    assert main([str(study_sweep), "--out", str(out), "--resamples", "200", "--no-plots",
                 "--baseline", "curriculum=none"]) == 0
    cmp = pd.read_csv(out / "comparisons.csv")
    assert set(cmp["baseline"]) == {RLOO_NONE} and len(set(cmp["condition"])) == 6


def test_runs_of_different_studies(tmp_path, capsys):
    other = dict(CURRICULUM_STUDY, name="threshold_study")
    a = write_conditions(tmp_path / "a", study_specs()[:2], seeds=(0, 1), n_prompts=30)
    b = write_conditions(tmp_path / "b", study_specs(other)[:2], seeds=(0, 1), n_prompts=30)
    assert main([str(a), str(b), "--out", str(tmp_path / "x"), "--no-plots", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "different studies" in err and "curriculum_study" in err and "threshold_study" in err
    with pytest.raises(StatsInputError, match="different studies"):
        analyze(load_sweep([a, b]), FAST)
    pooled = analyze(load_sweep([a, b]), dataclasses.replace(FAST, metrics=["pass@1"]))
    assert pooled.conditions.study is None and any("study blocks ignored" in p for p in pooled.problems)


def test_study_baseline_problems(tmp_path):
    study = dict(CURRICULUM_STUDY, baselines=[{"family": {"stage.name": "rloo"},
                                               "baseline": {"curriculum.name": "uniform"}}])
    root = write_conditions(tmp_path / "nomatch", study_specs(study, val_every=0)[:3], seeds=(0, 1), n_prompts=30)
    a = analyze(load_sweep(root), FAST)
    assert any("no condition's config matches the baseline (curriculum.name=uniform)" in p for p in a.problems)
    assert not len(a.comparisons.table)  # the family is not compared with anything else
    # a baseline that two conditions match is an error, not a guess
    study = dict(CURRICULUM_STUDY, baselines=[{"family": {"stage.name": "ipo"}, "baseline": {"tool.name": "off"}},
                                              {"family": {}, "baseline": {"tool.name": "off"}}])
    root = write_conditions(tmp_path / "ambiguous", study_specs(study, val_every=0)[:3], seeds=(0, 1), n_prompts=30)
    with pytest.raises(StatsInputError, match="matches several conditions"):
        analyze(load_sweep(root), FAST)


# ------------------------------------------------------------------------------ B: warnings


def test_run_warnings_are_shown(tmp_path, capsys):
    text = "frontier: explore fraction 0.97 over the last quarter of training: the sampler behaved as uniform"
    specs = [RunSpec(["curriculum=none"], 0.4), RunSpec(["curriculum=frontier"], 0.45)]
    root = write_conditions(tmp_path / "s", specs, seeds=(0, 1), n_prompts=30)
    status = root / "3" / "status.json"  # frontier, seed 1
    data = json.loads(status.read_text())
    status.write_text(json.dumps({**data, "warnings": [text, "replay: buffer never filled [uniform]"]}))
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--resamples", "200", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "explore fraction 0.97" in printed and "curriculum=frontier" in printed
    assert "never filled [uniform]" in printed  # printed as text, not read as console markup
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False).set_index("run")
    assert runs.loc[3, "warnings"] == f"{text} | replay: buffer never filled [uniform]"
    assert runs.loc[2, "warnings"] == ""
    report = (out / "report.md").read_text()
    section = report[report.index("## Warnings"):report.index("## Results")]
    assert "**curriculum=frontier**" in section and f"`3`: {text}" in section
    assert "`3`: replay: buffer never filled [uniform]" in section
    status.write_text(json.dumps(data))
    assert main([str(root), "--out", str(out), "--resamples", "200", "--no-plots", "--quiet"]) == 0
    assert "## Warnings" not in (out / "report.md").read_text()


# ------------------------------------------------------------------------------ C: steps to reach


def _val(run_dir: Path, col: str = "val/pass@1") -> pd.Series:
    f = pd.read_csv(run_dir / "metrics.csv")
    return f.dropna(subset=[col]).set_index("step")[col]


def test_reach_uses_held_out_pass_at_1_per_family(study_analysis, study_sweep):
    a = study_analysis
    reach = a.curves.reach
    assert set(reach["metric"]) == {"val/pass@1"} and set(reach["caveat"]) == {""}
    jobs = {a.conditions.labels[r.condition]: [] for r in a.conditions.sweep.runs}
    for r in a.conditions.sweep.runs:
        jobs[a.conditions.labels[r.condition]].append(r.path)
    runs = reach[reach["level"] == "run"]
    for cond, base in [(RLOO_STATIC, RLOO_NONE), (IPO_STATIC, IPO), (SFT_OFF, RLOO_FRONTIER)]:
        # threshold: the family baseline's final held-out value, unsmoothed, mean over its seeds
        thr = np.mean([_val(d).iloc[-1] for d in jobs[base]])
        mine = runs[runs["condition"] == cond]
        assert len(mine) == 3 and np.allclose(mine["threshold"], thr)
        for d, row in zip(sorted(jobs[cond]), mine.sort_values("run").itertuples()):
            v = _val(d)
            hit = v[v >= thr]
            assert row.reached == (len(hit) > 0)
            if len(hit):  # the first evaluated step at or above it, and the elapsed time logged there
                assert row.step == hit.index[0]
                assert row.time_s == pytest.approx(2.0 * (hit.index[0] + 1))
            else:  # never reached: censored at the run's last step, not dropped
                assert row.step == pd.read_csv(Path(d) / "metrics.csv")["step"].max()
        # the condition's mean is the restricted mean over every seed, reached or not
        (cond_row,) = reach[(reach["level"] == "condition") & (reach["condition"] == cond)].itertuples()
        assert cond_row.runs == 3 and cond_row.step == pytest.approx(mine["step"].mean())
    # the frontier condition is in two threshold groups: the rloo family's and the fallback baseline's
    assert len(set(reach[(reach["condition"] == RLOO_FRONTIER) & (reach["level"] == "condition")]["threshold"])) == 2
    curves = a.curves.table[a.curves.table["metric"] == "val/by_operands/3/pass@1"]
    assert sorted(set(curves["step"])) == [9, 19, 29, 39]
    assert list(dict.fromkeys(a.curves.table["metric"]))[0] == "val/pass@1"


def test_reach_on_training_reward_is_labelled(tmp_path):
    root = write_sweep(tmp_path / "s", {"none": 0.3, "static": 0.5}, n_prompts=30)
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--resamples", "200", "--quiet",
                 "--reach", "train/reward_mean>=0.2", "--reach", "val/score>=0.2"]) == 0
    reach = pd.read_csv(out / "reach.csv", keep_default_na=False)
    assert set(reach[reach["metric"] == "train/reward_mean"]["caveat"]) == {TRAIN_CAVEAT}
    assert set(reach[reach["metric"] == "val/score"]["caveat"]) == {""}
    report = (out / "report.md").read_text()
    assert f"**`train/reward_mean`: {TRAIN_CAVEAT}.**" in report and "`val/score`:" not in report
    assert (out / "val_curves.png").is_file() and (out / "curves.png").is_file()
    # the fallback default (no val/pass@1 logged) is the training reward, labelled too
    a = analyze(load_sweep(root), FAST)
    assert set(a.curves.reach["metric"]) == {"train/reward_mean"} and set(a.curves.reach["caveat"]) == {TRAIN_CAVEAT}


# ------------------------------------------------------------------------------ D: power


def test_planner_reaches_its_power_by_simulation():
    """Plant a known effect with a known seed variance in synthetic run data (per-prompt binomial
    counts around a per-seed shift), plan with the report's functions, then run 200 simulated sweeps
    through the report's seed-level test: the planned seeds, and the MDD at 3 seeds, detect ~80%."""
    rng = np.random.default_rng(7)
    n_prompts, n_samples, seed_sd, alpha = 100, 8, 0.02, 0.05
    base = rng.uniform(0.2, 0.6, n_prompts)

    def run_values(shift: float, shape: tuple) -> np.ndarray:
        p = np.clip(base + shift + rng.normal(0, seed_sd, shape + (1,)), 0, 1)
        return (rng.binomial(n_samples, p) / n_samples).mean(axis=-1)  # each run's pass@1

    # the seed-level SD of a run's pass@1: seed shift plus the prompts' sampling noise
    sd = float(np.sqrt(seed_sd ** 2 + np.mean(base * (1 - base)) / (n_samples * n_prompts)))
    assert pooled_sd(run_values(0, (400,)), run_values(0, (400,))) == pytest.approx(sd, rel=0.1)

    def detection_rate(effect: float, n: int) -> float:
        x, y = run_values(effect, (200, n)), run_values(0.0, (200, n))
        p = scipy.stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue  # what seed_test runs
        return float(np.mean((p < alpha) & (x.mean(axis=1) > y.mean(axis=1))))

    effect = 0.03
    n = int(seeds_needed(sd, effect, alpha))
    assert 5 <= n <= 40
    assert 0.7 <= detection_rate(effect, n) <= 0.92
    assert detection_rate(effect, max(2, n // 2)) < 0.7  # and fewer seeds would not do
    d3 = mdd(sd, 3, 3, alpha)
    assert 0.7 <= detection_rate(d3, 3) <= 0.92


def test_planner_edges_and_large_seed_counts():
    from statsmodels.stats.power import TTestIndPower

    # beyond a handful of seeds Welch's test has the pooled t-test's power (statsmodels)
    ref = TTestIndPower().solve_power(effect_size=None, nobs1=40, alpha=0.05, power=0.8)
    assert standard_mdd(40, 40, 0.05) == pytest.approx(ref, rel=0.02)
    assert standard_mdd(60, 60, 0.05) < standard_mdd(40, 40, 0.05) < standard_mdd(3, 3, 0.05)
    assert standard_mdd(3, 3, 0.01) > standard_mdd(3, 3, 0.05)  # Holm's alpha/m costs power
    assert np.isnan(mdd(0.0, 3, 3, 0.05)) and np.isnan(mdd(0.1, 1, 3, 0.05))
    assert seeds_needed(0.001, 1.0, 0.05) == 2 and seeds_needed(1.0, 1e-4, 0.05) == np.inf
    # thousands of seeds at a Holm-corrected alpha: statsmodels' power saturates to NaN there (a real
    # sweep's report crashed on it); the plan must still come out finite and monotone
    large = [standard_mdd(n, n, 0.05 / 40) for n in (51, 100, 1000, 10_000)]
    assert all(np.isfinite(large)) and large == sorted(large, reverse=True)
    assert 9_000 < seeds_needed(0.05, 0.003, 0.05 / 40) < 10_000

    def fmt(v):
        return f"{v:.3f}"

    assert power_line(3, 3, 0.02, 0.058, 11, 0.03, fmt) == \
        "inconclusive: 3 seeds detect >= 0.058; 11 seeds would detect 0.030"
    assert power_line(3, 2, 0.02, 0.07, 11, 0.03, fmt).startswith("inconclusive: 3 vs 2 seeds detect >= 0.070")
    assert power_line(1, 3, 0.02, np.nan, 11, 0.03, fmt) == (
        "inconclusive: the seed-level test needs >= 2 seeds per condition (have 1 and 3); "
        "11 seeds would detect 0.030")
    assert power_line(3, 3, 0.0, np.nan, np.nan, 0.03, fmt).endswith("power cannot be planned")
    assert "more than 10000 seeds" in power_line(3, 3, 1.0, 3.5, np.inf, 1e-4, fmt)


def test_power_lines_and_power_csv(tmp_path):
    root = write_sweep(tmp_path / "s", {"none": 0.40, "static": 0.41, "frontier": 0.7}, n_prompts=60)
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--resamples", "300", "--no-plots", "--quiet", "--power"]) == 0
    cmp = pd.read_csv(out / "comparisons.csv", keep_default_na=False).set_index("condition")
    assert bool(cmp.loc["curriculum=frontier", "significant_seed"])
    assert cmp.loc["curriculum=frontier", "power_note"] == ""
    line = cmp.loc["curriculum=static", "power_note"]
    m = re.fullmatch(r"inconclusive: 3 seeds detect >= (0\.\d{3}); (\d+) seeds would detect 0\.030", line)
    assert m, line
    # the plan is the planner's, from the seeds' own values, at alpha / 2 comparisons
    summary = pd.read_csv(out / "summary.csv")
    per_run = summary[(summary["level"] == "run") & (summary["metric"] == "pass@1")]
    x = per_run[per_run["condition"] == "curriculum=static"]["value"].to_numpy()
    y = per_run[per_run["condition"] == "curriculum=none"]["value"].to_numpy()
    sd = pooled_sd(x, y)
    assert float(m.group(1)) == pytest.approx(mdd(sd, 3, 3, 0.025), abs=6e-4)
    assert int(m.group(2)) == seeds_needed(sd, 0.03, 0.025)
    report = (out / "report.md").read_text()
    assert f"  - {line}" in report and report.count("  - inconclusive:") == 1
    power = pd.read_csv(out / "power.csv")
    assert {"pass@1", "coverage", "mean_response_length", "by_operands/4/pass@16"} <= set(power["metric"])
    assert set(power[power["deciding"]]["metric"]) == {"pass@1"}
    row = power[(power["metric"] == "pass@1") & (power["condition"] == "curriculum=static")].iloc[0]
    assert row["mdd"] == pytest.approx(cmp.loc["curriculum=static", "mdd"]) and row["alpha_power"] == 0.025
    # --effect changes the plan; without --power there is no power.csv but the line stays
    out2 = tmp_path / "out2"
    assert main([str(root), "--out", str(out2), "--resamples", "300", "--no-plots", "--quiet", "--effect", "0.1"]) == 0
    assert not (out2 / "power.csv").exists()
    note = pd.read_csv(out2 / "comparisons.csv").set_index("condition").loc["curriculum=static", "power_note"]
    assert note.endswith("seeds would detect 0.100")


def test_study_effect_is_the_default(study_analysis):
    cmp = study_analysis.comparisons.table
    assert set(cmp["effect"]) == {CURRICULUM_STUDY["effect"]}
    assert (cmp["alpha_power"] == 0.05 / len(cmp)).all()
    lines = cmp[cmp["power_note"] != ""]["power_note"]
    assert len(lines) and all(s.endswith(" would detect 0.050") or "cannot" in s for s in lines)


# ------------------------------------------------------------------------------ D: condition names


NAMED = {"no curriculum": {"stage.name": "rloo", "curriculum.name": "none"},
         "frontier": {"curriculum.name": "frontier"}, "IPO": {"stage.name": "ipo", "curriculum": None}}


def _numbers(df: pd.DataFrame) -> pd.DataFrame:
    return df.select_dtypes("number").reset_index(drop=True)


def test_names_change_labels_and_no_number(tmp_path, study_analysis):
    root = write_conditions(tmp_path / "named", study_specs(dict(CURRICULUM_STUDY, names=NAMED)))
    a = analyze(load_sweep(root), FAST)
    assert not a.problems
    labels = set(a.conditions.table["condition"])
    assert {"no curriculum", "frontier", "IPO", RLOO_STATIC, IPO_STATIC} <= labels
    assert RLOO_NONE not in labels
    assert set(a.comparisons.table["baseline"]) == {"no curriculum", "IPO", SFT_ON, "frontier"}
    # the unnamed sweep has the same samples (same fixture seed): every number is the same
    for stage, name in (("summary", "table"), ("comparisons", "table"), ("summary", "robust"), ("curves", "reach")):
        pd.testing.assert_frame_equal(_numbers(getattr(getattr(a, stage), name)),
                                      _numbers(getattr(getattr(study_analysis, stage), name)))
    # --name wins over the study's name and works on overrides
    b = analyze(load_sweep(root), dataclasses.replace(FAST, names=["static RLOO:curriculum=static,stage=rloo",
                                                                   "none:curriculum=none", "ipo:stage=ipo"]))
    assert {"static RLOO", "none", "frontier"} <= set(b.conditions.table["condition"]) and "no curriculum" not in set(
        b.conditions.table["condition"])
    # stage=ipo is in two conditions' overrides: the one with the fewest is meant (as for --baseline)
    labels_b = b.conditions.labels
    assert labels_b[("stage=ipo",)] == "ipo" and labels_b[("curriculum=static", "stage=ipo")] == IPO_STATIC
    pd.testing.assert_frame_equal(_numbers(b.comparisons.table), _numbers(study_analysis.comparisons.table))
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--resamples", "300", "--no-plots", "--quiet",
                 "--name", "static RLOO:curriculum=static,stage=rloo"]) == 0
    report = (out / "report.md").read_text()
    assert f"**static RLOO** = `{RLOO_STATIC}`" in report and "| static RLOO |" in report
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs[runs["condition"] == "static RLOO"]["overrides"]) == {RLOO_STATIC}


@pytest.mark.parametrize("spec, message", [
    ("x:curriculum=uniform", "matches 0 .*conditions: curriculum=frontier,stage=rloo"),
    ("x:curriculum=static", "matches 2 .*curriculum=static,stage=ipo; curriculum=static,stage=rloo"),
    ("x curriculum=static", "expects LABEL:KEY=VALUE"),
    ("x:static", "expects key=value"),
    ("x:curriculum=none,stage=rloo|y:curriculum=none", "x:curriculum=none,stage=rloo and --name y:curriculum=none name the same"),
    (f"{RLOO_STATIC}:curriculum=frontier", "would name 2 conditions"),
])
def test_bad_names_on_the_command_line_are_errors(study_sweep, spec, message):
    with pytest.raises(StatsInputError, match=message):
        analyze(load_sweep(study_sweep), dataclasses.replace(FAST, names=spec.split("|")))


def test_bad_study_names_are_data_problems(tmp_path):
    names = {"rloo": {"stage.name": "rloo"}, "frontier": {"curriculum.name": "frontier"},
             "again": {"curriculum.name": "frontier"}, "ipo": {"stage.name": "ipo", "curriculum": None},
             "stage=sft,tool=on": {"stage.name": "ipo", "curriculum.name": "static"}}
    root = write_conditions(tmp_path / "bad", study_specs(dict(CURRICULUM_STUDY, names=names), val_every=0),
                            seeds=(0, 1), n_prompts=30)
    a = analyze(load_sweep(root), FAST)
    labels = set(a.conditions.table["condition"])
    assert "ipo" in labels and not {"rloo", "frontier", "again"} & labels
    assert IPO_STATIC in labels  # its name clashes with another condition's label: not used
    assert any("names 'rloo' must match exactly one condition, it matches 3" in p for p in a.problems)
    assert any("names 'again' and names 'frontier' name the same condition" in p for p in a.problems)
    assert any("'stage=sft,tool=on' would name 2 conditions" in p for p in a.problems)
    problems: list[str] = []
    assert parse_study({"name": "s", "names": {"x": "stage=sft"}}, problems).names == {} and len(problems) == 1
