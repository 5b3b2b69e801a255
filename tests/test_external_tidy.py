"""Issue 60: a tidy table of runs from any trainer through `python -m ablate.stats RUNS --study STUDY.yaml`:
the same claims engine, registration and checks as ablate's own runs, one clear line per bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from ablate.stats.__main__ import main as stats_main

STUDY = {
    "name": "ext_study",
    "question": "Does DAPO beat GRPO?",
    "metrics": ["accuracy"],
    "baselines": [{"family": {}, "baseline": {"algo": "grpo"}}],
    "claims": [{"id": "dapo_beats_grpo", "claim": "DAPO beats GRPO", "metric": "accuracy",
                "condition": "algo=dapo", "baseline": "algo=grpo", "direction": "higher", "effect": 0.05}],
    "plan": {"looks": [6, 12], "spending": "pocock"},
    "test": "welch",
}


def table(effect: float, seeds: int = 6, rng_seed: int = 0, sd: float = 0.02, **extra) -> pd.DataFrame:
    rng = np.random.default_rng(rng_seed)
    rows = []
    for s in range(seeds):  # interleaved: every arm's seed s before any arm's seed s+1
        for algo, mu in (("grpo", 0.5), ("dapo", 0.5 + effect)):
            rows.append({"algo": algo, "seed": s, "accuracy": mu + rng.normal(0, sd), "reward": rng.random(),
                         "notes": "ok", **{k: v(algo, s) for k, v in extra.items()}})
    return pd.DataFrame(rows)


def write(tmp_path, frame: pd.DataFrame, study: dict = STUDY, name: str = "runs.csv"):
    runs, spec = tmp_path / name, tmp_path / "study.yaml"
    if name.endswith(".parquet"):
        frame.to_parquet(runs, index=False)
    elif name.endswith(".jsonl"):
        frame.to_json(runs, orient="records", lines=True)
    else:
        frame.to_csv(runs, index=False)
    spec.write_text(yaml.safe_dump({"study": study}, sort_keys=False))
    return runs, spec


def report(tmp_path, runs, spec, *extra) -> tuple[int, pd.DataFrame | None]:
    out = tmp_path / "report"
    rc = stats_main([str(runs), "--study", str(spec), "--out", str(out), "--no-plots", "--quiet", *extra])
    claims = pd.read_csv(out / "claims.csv") if (out / "claims.csv").is_file() else None
    return rc, claims


@pytest.mark.parametrize("name", ["runs.csv", "runs.parquet", "runs.jsonl"])
def test_planted_effect_is_replicated_and_null_is_not(tmp_path, name):
    rc, claims = report(tmp_path, *write(tmp_path, table(0.08), name=name))
    assert rc == 0
    row = claims.iloc[0]
    assert row["verdict"] == "replicated" and row["n"] == 6 and row["n_baseline"] == 6
    assert row["estimate"] == pytest.approx(0.08, abs=0.03)
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    dapo = summary[(summary["level"] == "condition") & (summary["condition"] == "algo=dapo")
                   & (summary["metric"] == "accuracy")].iloc[0]
    assert dapo["n_seeds"] == 6 and dapo["ci_low"] < dapo["value"] < dapo["ci_high"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "dapo_beats_grpo" in md and "exploratory" in md  # no registration: every verdict exploratory
    assert "python -m ablate.studies.register --study STUDY.yaml" in md
    # a table's column has no eval regime: the claim shows the summary's neutral `runs`, not a preset's no_tool
    assert row["regime"] == "runs" and "accuracy (`runs`)" in md and "no_tool" not in md
    rc, claims = report(tmp_path, *write(tmp_path, table(0.0, rng_seed=1), name=name))
    assert rc == 0 and claims.iloc[0]["verdict"] != "replicated"


def test_same_records_as_ablate_runs(tmp_path):
    """The table's runs become ablate's Run records: conditions as overrides, seed, study in the config."""
    from ablate.external.tidy import tidy_runs

    tr = tidy_runs(table(0.05), STUDY, tmp_path / "runs.csv")
    assert tr.condition_columns == ["algo"] and tr.metric_columns == ["accuracy", "reward"]
    assert tr.descriptive == ["notes"]
    conds = tr.sweep.conditions()
    assert list(conds) == [("algo=dapo",), ("algo=grpo",)]
    run = conds[("algo=dapo",)][0]
    assert run.seed == "0" and run.ok and run.study["name"] == "ext_study" and run.config["algo"] == "dapo"


@pytest.mark.parametrize("damage, expected", [
    (lambda f: f.drop(columns="seed"), "no `seed` column"),
    (lambda f: pd.concat([f, f.iloc[[3]]]), "the same run twice (algo=dapo, seed 1)"),
    (lambda f: f.drop(columns="algo"), "no `algo` column"),
])
def test_fatal_table_problems_one_line_each(tmp_path, capsys, damage, expected):
    rc, claims = report(tmp_path, *write(tmp_path, damage(table(0.05))))
    err = capsys.readouterr().err
    assert rc == 2 and claims is None
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0]


def test_claim_naming_what_the_table_lacks(tmp_path, capsys):
    study = {**STUDY, "claims": [
        {**STUDY["claims"][0], "id": "bad_arm", "condition": "algo=ppo"},
        {**STUDY["claims"][0], "id": "bad_metric", "metric": "mean:val/acc"}]}
    rc, _ = report(tmp_path, *write(tmp_path, table(0.05), study))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(lines) == 2
    assert "claim bad_arm: its condition 'algo=ppo' is no condition" in lines[0]
    assert "claim bad_metric: metric 'mean:val/acc' reads val/acc" in lines[1]


def test_bad_cells_are_named_and_not_used(tmp_path):
    frame = table(0.08)
    frame["accuracy"] = frame["accuracy"].astype(object)
    frame.loc[0, "accuracy"] = np.nan  # grpo seed 0
    frame.loc[3, "accuracy"] = "oops"  # dapo seed 1
    rc, claims = report(tmp_path, *write(tmp_path, frame))
    assert rc == 0
    row = claims.iloc[0]
    assert (row["n"], row["n_baseline"]) == (5, 5)  # each arm lost the one bad value, nothing else
    md = (tmp_path / "report" / "report.md").read_text()
    assert "row 2 (algo=grpo seed 0): accuracy is empty; not used" in md
    assert "row 5 (algo=dapo seed 1): accuracy is 'oops', not a finite number; not used" in md


def test_one_seed_arm_is_named_and_not_decided(tmp_path):
    frame = table(0.3)
    frame = frame[(frame["algo"] == "grpo") | (frame["seed"] == 0)]
    rc, claims = report(tmp_path, *write(tmp_path, frame))
    assert rc == 0 and claims.iloc[0]["verdict"] == "inconclusive"
    md = (tmp_path / "report" / "report.md").read_text()
    assert "algo=dapo: one seed only; a claim on this arm cannot be decided" in md


@pytest.mark.parametrize("extra, why", [
    ({"machine": lambda algo, s: "h100" if algo == "dapo" else "a100"}, "different machines (h100 vs a100)"),
    ({"torch_version": lambda algo, s: "2.5" if algo == "dapo" else "2.4"}, "different torch versions"),
    ({"started_at": lambda algo, s: f"2025-03-0{1 + (algo == 'dapo')}T0{s}:00:00+00:00"}, "separate time spans"),
])
def test_arms_aliased_with_where_or_when_are_refused(tmp_path, extra, why):
    rc, claims = report(tmp_path, *write(tmp_path, table(0.08, **extra)))
    row = claims.iloc[0]
    assert rc == 0 and row["verdict"] == "not testable"
    assert row["reason"].startswith("refused (replicated otherwise)") and why in row["reason"]


def test_interleaved_machines_and_times_decide(tmp_path):
    extra = {"machine": lambda algo, s: "h100" if s % 2 else "a100",
             "started_at": lambda algo, s: f"2025-03-01T{s:02d}:{10 * (algo == 'dapo'):02d}:00+00:00"}
    rc, claims = report(tmp_path, *write(tmp_path, table(0.08, **extra)))
    assert rc == 0 and claims.iloc[0]["verdict"] == "replicated"


def test_registered_external_study_is_confirmatory(tmp_path, capsys):
    from ablate.studies.register import main as register_main

    runs, spec = write(tmp_path, table(0.08, started_at=lambda algo, s: f"2099-01-01T{s:02d}:0{int(algo == 'dapo')}:00+00:00"))
    assert register_main(["--study", str(spec)]) == 0
    assert (tmp_path / "registration.yaml").is_file()
    rc, claims = report(tmp_path, runs, spec, "--registration", str(tmp_path))
    assert rc == 0 and claims.iloc[0]["standing"] == "confirmatory" and claims.iloc[0]["verdict"] == "replicated"
    # the study changed after registration: the registered block still decides, the change is shown apart
    changed = {**STUDY, "claims": [{**STUDY["claims"][0], "effect": 0.2}]}
    spec.write_text(yaml.safe_dump({"study": changed}))
    rc, claims = report(tmp_path, runs, spec, "--registration", str(tmp_path))
    assert set(claims["standing"]) == {"confirmatory", "amended after the data"}


def test_next_look_names_the_seeds_to_train(tmp_path, capsys):
    from ablate.studies.next_look import main as next_main

    runs, spec = write(tmp_path, table(0.01, sd=0.05))  # a small effect: inconclusive at 6 seeds
    capsys.readouterr()
    assert next_main([str(runs), "--study", str(spec)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [
        "algo=dapo: train seeds 6-11 (6 more, to 12 seeds per arm at look 2; open claim(s): dapo_beats_grpo); "
        "add their rows with look=2",
        "algo=grpo: train seeds 6-11 (6 more, to 12 seeds per arm at look 2; open claim(s): dapo_beats_grpo); "
        "add their rows with look=2"]


def test_curves_with_steps_and_curve_metrics(tmp_path):
    rows = []
    for s in range(6):
        for algo, slope in (("grpo", 0.01), ("dapo", 0.03)):
            for step in range(5):
                rows.append({"algo": algo, "seed": s, "step": step, "reward": slope * step + 0.001 * s})
    study = {**STUDY, "metrics": ["reward"], "claims": [
        {"id": "faster", "claim": "DAPO's reward rises faster", "metric": "slope:reward", "condition": "algo=dapo",
         "baseline": "algo=grpo", "direction": "higher", "effect": 0.01},
        {"id": "final", "claim": "DAPO ends higher", "metric": "reward", "condition": "algo=dapo",
         "baseline": "algo=grpo", "direction": "higher", "effect": 0.01}]}
    rc, claims = report(tmp_path, *write(tmp_path, pd.DataFrame(rows), study))
    assert rc == 0
    by = claims.set_index("id")
    assert by.loc["faster", "estimate"] == pytest.approx(0.02)
    assert by.loc["final", "estimate"] == pytest.approx(0.08)  # a plain name is the last logged value
    curves = pd.read_csv(tmp_path / "report" / "curves.csv.gz")
    assert set(curves["step"]) == {0, 1, 2, 3, 4} and set(curves["condition"]) == {"algo=dapo", "algo=grpo"}


def test_per_prompt_table_for_the_describing_tests(tmp_path):
    rng = np.random.default_rng(3)
    rows = []
    for s in range(6):
        for algo, p in (("grpo", 0.3), ("dapo", 0.7)):
            rows += [{"algo": algo, "seed": s, "id": f"q{j}", "n": 4, "n_correct": int(rng.binomial(4, p))}
                     for j in range(20)]
    rows.append({"algo": "dapo", "seed": 0, "id": "q99", "n": 4, "n_correct": 5})  # more correct than samples
    rows.append({"algo": "dapo", "seed": 42, "id": "q0", "n": 4, "n_correct": 1})  # a run RUNS lacks
    prompts = tmp_path / "prompts.csv"
    pd.DataFrame(rows).to_csv(prompts, index=False)
    gate = {"check": "dapo solves prompts", "metric": "pass@1", "op": ">=", "threshold": 0.5}
    study = {**STUDY, "metrics": ["pass@1", "accuracy"], "claims": [
        {**STUDY["claims"][0], "id": "pass1", "metric": "pass@1", "effect": 0.1},
        {**STUDY["claims"][0], "id": "gated", "effect": 0.02, "precondition": gate}]}
    rc, claims = report(tmp_path, *write(tmp_path, table(0.05), study), "--prompts", str(prompts))
    assert rc == 0
    row, gated = claims.iloc[0], claims.iloc[1]
    assert row["verdict"] == "replicated" and row["estimate"] == pytest.approx(0.4, abs=0.08)
    assert row["regime"] == "no_tool"  # a per-prompt metric keeps its table's regime (no_tool by default)
    # a claim on a column (regime `runs`) gated on a per-prompt metric: the gate still reads it under no_tool
    assert gated["regime"] == "runs" and gated["precondition_status"] == "held" and gated["verdict"] == "replicated"
    cmp = pd.read_csv(tmp_path / "report" / "comparisons.csv")
    assert len(cmp) and (cmp["n_shared_prompts"] == 20).all()  # the paired prompt test describes the models
    md = (tmp_path / "report" / "report.md").read_text()
    assert "prompts.csv row 242: n_correct is not a whole number in [0, n]; not used" in md
    assert "prompts.csv row 243: no such run in the runs table; not used" in md
