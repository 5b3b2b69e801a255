"""The study presets (conf/experiment/*_study.yaml): one command runs a paper's study, one reports it."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.config import CONF_DIR

STUDIES = {  # preset -> the jobs of one seed (overrides besides experiment= and seed=)
    "curriculum_study": [
        {"curriculum=none", "stage.pool_size=500"}, {"curriculum=static", "stage.pool_size=500"},
        {"curriculum=frontier", "stage.pool_size=500"}, {"curriculum=frontier_replay", "stage.pool_size=500"},
        {"stage=ipo", "stage.pairs.order=none"}, {"stage=ipo", "stage.pairs.order=static"}],
    "curriculum_ladder_study": [{f"curriculum={c}", "stage.pool_size=500"} for c in ("none", "frontier", "frontier_replay")],
    "tool_annealing_mixed_study": [{f"tool={t}"} for t in ("off", "on", "anneal_linear")],
    "threshold_study": [{"curriculum=none"}, {"curriculum=threshold"}, {"curriculum=static_thirds"}],
    "dots_replay_study": [{"curriculum=none", "replay.enabled=false"}, {"curriculum=none", "replay.enabled=true"},
                          {"curriculum=dots", "replay.enabled=false"}, {"curriculum=dots", "replay.enabled=true"},
                          {"curriculum=none", "replay.enabled=false", "dynamic_sampling.enabled=true"}],
    "tool_annealing_study": [{f"tool={t}"} for t in ("off", "on", "anneal_linear", "anneal_step", "anneal_log")],
    "dapo_components_study": [{"recipe=dapo", "stage.clip_eps_high=0.28"}, {"recipe=dapo", "stage.clip_eps_high=0.2"},
                              {"recipe=dapo", "dynamic_sampling.enabled=false"},
                              {"recipe=dapo", "stage.aggregation=sequence_mean"},
                              {"recipe=dapo", "stage.overlong_buffer=0"}, {"recipe=grpo"}, {"recipe=dr_grpo"}],
    "oracle_tool_study": [
        {"stage=sft"}, {"stage=dpo"},
        {"stage=sft", "stage.trace=oracle", "tool=oracle", "stage.max_length=480",
         "model.arch.max_position_embeddings=512", "eval.max_new_tokens=460", "eval.batch_size=256"}],
}
# a testbed re-run's smoke runs one arm: its grid and report are its base study's, already run whole above
# (the arm is the one whose mechanism the testbed exists for); what is new is the testbed's upstream SFT
SMOKE_ARM = {"curriculum_ladder_study": "curriculum=frontier", "tool_annealing_mixed_study": "tool=anneal_linear"}
# what a study's smoke run needs besides smoke_study (its preset header says so too)
# (a testbed's own SFT at smoke scale: 4 steps on a 300-problem pool; its default 50,000-problem pool
# takes ~80 s to generate on a fresh cache, which every xdist worker of the suite has)
SMOKE_SFT = ["upstream.sft.max_steps=4", "upstream.sft.warmup_steps=1", "upstream.sft.pool_size=300"]
SMOKE_EXTRA = {"tool_annealing_study": SMOKE_SFT, "tool_annealing_mixed_study": SMOKE_SFT, "curriculum_ladder_study": SMOKE_SFT,
               "oracle_tool_study": ["eval.max_new_tokens=48"]}


def compose_study(name, *overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[f"experiment={name}", *overrides], return_hydra_config=True)


def sweep_jobs(name, *command_line):
    """The overrides of every job `python -m ablate.train -m experiment=<name> <command_line>` launches."""
    from hydra_plugins.ablate_sweeper.grid_sweeper import sweep_jobs as jobs

    sweeper_cfg = compose_study(name).hydra.sweeper
    # without `grids` (the basic sweeper's presets) the grid sweeper makes the basic sweeper's product
    return jobs(OmegaConf.to_container(sweeper_cfg.params), sweeper_cfg.get("grids"), list(command_line))


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_preset_describes_itself_and_carries_its_grid(name):
    header = (CONF_DIR / "experiment" / f"{name}.yaml").read_text().split("defaults:")[0]
    for part in ("Question:", "Paper", "Conditions:", "Deciding metrics:", "Scale:", "python -m ablate.stats"):
        assert part in header, f"{name}.yaml header lacks {part!r}"
    cfg = compose_study(name)
    study = cfg.study
    assert study.name == name and study.question and study.metrics[0] == "pass@1" and float(study.effect) > 0
    assert cfg.eval.every and cfg.trainer.num_threads == 1
    jobs = sweep_jobs(name)
    seeds = sorted({o for job in jobs for o in job if o.startswith("seed=")})
    assert len(seeds) >= 3, "a study runs several seeds by default"
    # (Hydra renders a swept false as False)
    first_seed = [{o.replace("=False", "=false").replace("=True", "=true") for o in job} - {seeds[0]}
                  for job in jobs if seeds[0] in job]
    assert sorted(map(sorted, first_seed)) == sorted(map(sorted, STUDIES[name]))
    assert len(jobs) == len(seeds) * len(STUDIES[name])
    # every baseline rule and every condition name picks exactly one condition the grid runs
    configs = [compose_study(name, *sorted(job)) for job in first_seed]
    wheres = [rule.baseline for rule in study.baselines] + list((study.get("names") or {}).values())
    for where in wheres:
        matches = [job for job, cfg in zip(first_seed, configs)
                   if all(OmegaConf.select(cfg, key) == value for key, value in where.items())]
        assert len(matches) == 1, (where, matches)
    if study.get("names"):  # named presets name every condition
        assert len(study.names) == len(first_seed)


def test_the_grid_sweeper_unions_its_grids_and_the_command_line_wins():
    jobs = sweep_jobs("curriculum_study", "seed=0,1")
    assert len(jobs) == 12 and len({tuple(j) for j in jobs}) == 12
    ipo = [j for j in jobs if "stage=ipo" in j]
    assert len(ipo) == 4 and not any("stage.pool_size=500" in j for j in ipo)  # a grid's keys stay in it
    # a command-line value of a key a grid sets replaces it in that grid, and duplicates collapse
    jobs = sweep_jobs("curriculum_study", "seed=0", "curriculum=static")
    assert sorted(map(sorted, jobs)) == sorted(map(sorted, [
        ["seed=0", "curriculum=static", "stage.pool_size=500"],
        ["seed=0", "stage=ipo", "stage.pairs.order=none", "curriculum=static"],
        ["seed=0", "stage=ipo", "stage.pairs.order=static", "curriculum=static"]]))


def test_cfg_hydra_with_multirun_prints_the_study_grid(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ablate.train", "-m", "experiment=curriculum_study", "--cfg", "hydra"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "grids:" in out.stdout and "curriculum: none,static,frontier,frontier_replay" in out.stdout


# one study a family in the default tier (the curriculum samplers; the tool schedules and a testbed's own
# SFT; SFT then preference training): the others are slow-marked and CI runs them (`-m slow`)
FAMILY_SMOKES = {"threshold_study", "tool_annealing_mixed_study", "oracle_tool_study"}


@pytest.mark.parametrize("name", [n if n in FAMILY_SMOKES else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(STUDIES)])
def test_each_study_runs_end_to_end_at_smoke_scale(name, tmp_path):
    sweep = tmp_path / "sweep"
    out = subprocess.run([sys.executable, "-m", "ablate.train", "-m", f"experiment=[{name},smoke_study]",
                          f"hydra.sweep.dir={sweep}", *SMOKE_EXTRA.get(name, []),
                          *([SMOKE_ARM[name]] if name in SMOKE_ARM else [])],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(p.parent.parent for p in sweep.glob("*/.hydra/config.yaml"))
    assert len(runs) == (1 if name in SMOKE_ARM else len(STUDIES[name]))
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "completed", (run, status.get("error"))
        assert (run / "eval" / "no_tool" / "summary.json").is_file()
        assert OmegaConf.load(run / ".hydra" / "config.yaml").study.name == name
        metrics = pd.read_csv(run / "metrics.csv")
        assert metrics["val/pass@1"].notna().sum() == 2  # eval.every=1 over 2 steps
        config = OmegaConf.load(run / ".hydra" / "config.yaml")
        hardest = max(config.task.generator.counts)  # the testbed's ladder (ladder23: 2-3 numbers)
        assert f"val/by_operands/{hardest}/no_answer_rate" in metrics
        with_tool = config.tool.kind == "oracle" and config.tool.schedule != "off"  # eval.val_regime=auto
        assert ("val @ 2 updates (with the tool)" in (run / "train.log").read_text()) == with_tool
    names = OmegaConf.load(runs[0] / ".hydra" / "config.yaml").study.get("names")
    if names and name not in SMOKE_ARM:  # the report labels the conditions by the preset's names
        from ablate.stats.__main__ import main as stats

        assert stats([str(sweep), "--out", str(tmp_path / "stats"), "--resamples", "200", "--no-plots", "--quiet"]) == 0
        assert set(pd.read_csv(tmp_path / "stats" / "runs.csv")["condition"]) == set(names)
        # the declared claims come first, one row each, every one with a verdict of the partition
        claims = pd.read_csv(tmp_path / "stats" / "claims.csv")
        declared = OmegaConf.load(runs[0] / ".hydra" / "config.yaml").study.claims
        assert list(claims["id"]) == [c.id for c in declared]
        assert set(claims["verdict"]) <= {"replicated", "not replicated", "inconclusive", "not testable", "descriptive"}
        assert (tmp_path / "stats" / "report.md").read_text().index("## Claims") < \
            (tmp_path / "stats" / "report.md").read_text().index("## Runs")


@pytest.mark.parametrize("stage", ["rloo", "ipo"])
def test_a_smoke_study_trains_no_upstream_for_stages_that_start_from_the_shipped_sft(stage):
    from ablate.upstream import is_shipped

    assert is_shipped(compose_study("[curriculum_study,smoke_study]", f"stage={stage}"), "sft")
