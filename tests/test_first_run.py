"""A new user's first commands (issue 15, "First run"): `experiment=smoke` keeps its promise of
seconds with any group, parallel local sweeps work after the plain install, and the console and the
log file carry no noise."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.checks import ConfigError, check_config

# Every group and switch a user is likely to add to a smoke preset: each curriculum, tool schedule,
# reward and stage (and the upstreams a stage may start from), replay, dynamic sampling, DDP on CPU.
GROUPS = [(), ("curriculum=static",), ("curriculum=frontier",), ("curriculum=none",), ("curriculum=threshold",),
          ("curriculum=static_thirds",), ("curriculum=frontier_replay",), ("curriculum=dots",), ("stage=sft",),
          ("stage=rloo",), ("stage=dpo",), ("stage=ipo",), ("stage=rloo", "stage.init=ipo"),
          ("stage=rloo", "stage.init=dpo"), ("stage=dpo", "stage.init=ipo"), ("stage=dpo", "curriculum=static"),
          ("tool=on",), ("tool=oracle", "stage=rloo", "upstream.sft.trace=oracle"), ("tool=anneal_linear", "stage=rloo"),
          ("tool=anneal_log", "stage=rloo"), ("tool=anneal_step", "stage=rloo"), ("reward=binary",),
          ("reward=partial", "stage=rloo"), ("stage=rloo", "replay.enabled=true"),
          ("stage=rloo", "dynamic_sampling.enabled=true"),
          ("curriculum=dots", "replay.enabled=true", "dynamic_sampling.enabled=true"),
          ("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")]


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("preset", ["smoke", "smoke_rloo", "smoke_dpo"])
@pytest.mark.parametrize("groups", GROUPS, ids=lambda g: ",".join(g) or "alone")
def test_smoke_presets_size_every_stage_and_upstream(preset, groups):
    # With validation during training (eval.every): its checks only add to those of a run without it.
    cfg = compose_cfg(f"experiment={preset}", *groups, "eval.every=2")
    rl_curriculum = any(g.startswith("curriculum=") and g != "curriculum=static" for g in groups)
    rl_only = rl_curriculum or any(g.split("=")[0] in ("replay.enabled", "dynamic_sampling.enabled") for g in groups)
    if preset == "smoke_dpo" and rl_only and "stage=rloo" not in groups:
        with pytest.raises(ConfigError, match="chooses RL prompts|needs stage=rloo"):  # the preset picks stage=dpo
            check_config(cfg)
        return
    check_config(cfg)
    stages = [cfg.stage, *(cfg.upstream[name] for name in ("sft", "dpo", "ipo"))]
    for stage in stages:
        assert int(stage.max_steps) <= 6 and int(stage.pool_size) <= 300, (stage.name, groups)
        if stage.name in ("dpo", "ipo"):
            assert stage.pairs.source == "solver" and int(stage.pairs.n_prompts) <= 16
        if stage.name == "rloo":
            assert int(stage.batch_prompts) * int(stage.k) <= 16 and int(stage.sampling.max_new_tokens) <= 16
    assert int(cfg.task.test_size) <= 12 and int(cfg.eval.n) <= 4 and not cfg.upstream.eval
    assert int(cfg.eval.val_size) <= 8 and int(cfg.eval.val_n) <= 2  # validation at smoke scale too


def test_smoke_with_the_oracle_tool_names_the_trace_it_needs():
    """tool=oracle needs SFT on oracle trajectories: the refusal says which key, and the oracle SFT
    preset composes with smoke (sizes from smoke, the oracle format's context from oracle_sft)."""
    for overrides in (("experiment=smoke", "tool=oracle"), ("experiment=smoke_dpo", "tool=oracle")):
        with pytest.raises(ConfigError, match="stage.trace=oracle"):
            check_config(compose_cfg(*overrides))
    cfg = compose_cfg("experiment=[oracle_sft,smoke]", "eval.every=2")
    check_config(cfg)
    assert cfg.stage.trace == "oracle" and int(cfg.stage.max_steps) <= 6 and int(cfg.eval.val_size) <= 8


def run(args, cwd, timeout=600):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("overrides, steps", [
    (["experiment=smoke_rloo", "stage.max_steps=4", "eval.every=2"], 4),  # issue 31's command
    (["experiment=smoke_dpo", "eval.every=2"], 4),
    (["experiment=smoke", "curriculum=dots", "replay.enabled=true", "dynamic_sampling.enabled=true",
      "tool=anneal_linear", "eval.every=3"], 6),
], ids=["rloo", "dpo", "dots_replay_dynamic_tool"])
def test_smoke_presets_train_with_validation(tmp_path, overrides, steps):
    result = run(["-m", "ablate.train", *overrides, "trainer.num_threads=1", "hydra.run.dir=run"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    import pandas as pd

    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    every = int(overrides[-1].split("=")[1])
    assert metrics["step"].tolist() == list(range(steps))
    assert metrics.dropna(subset=["val/pass@1"])["step"].tolist() == list(range(every - 1, steps, every))
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "completed"


NOISE = ("💡 Tip", "exists and is not empty", "LeafSpec", "Traceback")


@pytest.mark.slow
def test_headline_sweep_in_seconds_then_stats_quietly(tmp_path):
    sweep = tmp_path / "sweep"
    start = time.monotonic()
    result = run(["-m", "ablate.train", "-m", "curriculum=static,frontier,none", "seed=0,1", "experiment=smoke",
                  "trainer.num_threads=1", f"hydra.sweep.dir={sweep}"], tmp_path)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert elapsed < 180, f"the smoke sweep took {elapsed:.0f} s"
    states = [json.loads((sweep / str(job) / "status.json").read_text())["state"] for job in range(6)]
    assert states == ["completed"] * 6
    console = result.stdout + result.stderr
    for noise in NOISE:
        assert noise not in console, noise
    assert "\r" not in console  # no progress bars in a sweep job: log lines instead
    assert console.count("GPU available") == 0 and "step 6/6" in console
    assert "Done   6 out of   6" in console  # the sweep's progress: joblib's line as each job ends (launcher/local)
    for job in range(6):
        log = (sweep / str(job) / "train.log").read_text()
        fits = log.count("`Trainer.fit` stopped")  # job 0 also trains the (cached) upstream SFT
        assert "\r" not in log and "💡" not in log and fits >= 1 and log.count("GPU available") == fits
    stats = run(["-m", "ablate.stats", str(sweep), "--out", str(tmp_path / "report"), "--resamples", "200"], tmp_path)
    assert stats.returncode == 0, stats.stderr[-3000:]
    for noise in NOISE:
        assert noise not in stats.stdout + stats.stderr


@pytest.mark.slow
def test_sweeps_run_in_parallel_by_default_with_the_numbers_of_one_after_another(tmp_path):
    """The default launcher (joblib, one job per core on CPU) splits the cores between the jobs, and a
    job's numbers are those of the same job run one after another (basic launcher) at the same threads."""
    import os

    import pandas as pd

    from ablate.config import local_sweep_jobs

    parallel, serial = tmp_path / "parallel", tmp_path / "serial"
    result = run(["-m", "ablate.train", "-m", "seed=0,1", "experiment=smoke", f"hydra.sweep.dir={parallel}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    status = [json.loads((parallel / str(job) / "status.json").read_text()) for job in range(2)]
    assert [s["state"] for s in status] == ["completed"] * 2
    assert [s["threads"] for s in status] == [max(1, (os.cpu_count() or 1) // local_sweep_jobs())] * 2
    pinned = ["seed=0,1", "experiment=smoke", "trainer.num_threads=1"]
    for launcher, sweep in (("local", parallel / "pinned"), ("basic", serial)):
        result = run(["-m", "ablate.train", "-m", f"hydra/launcher={launcher}", *pinned, f"hydra.sweep.dir={sweep}"],
                     tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    for job in range(2):
        a, b = (pd.read_csv(sweep / str(job) / "metrics.csv") for sweep in (parallel / "pinned", serial))
        numbers = [c for c in a.columns if not c.startswith("time/")]
        pd.testing.assert_frame_equal(a[numbers], b[numbers])
        assert (json.loads((parallel / "pinned" / str(job) / "eval" / "no_tool" / "summary.json").read_text())
                == json.loads((serial / str(job) / "eval" / "no_tool" / "summary.json").read_text()))


def test_console_setup_quiets_lightning_and_bars(tmp_path):
    script = """
import logging, os, warnings
from ablate import console
console.setup(False)
import lightning
from lightning.pytorch.utilities import rank_zero_info
assert not any(isinstance(h, logging.StreamHandler) for h in logging.getLogger("lightning").handlers)
rank_zero_info("💡 Tip: install something")
logging.getLogger("lightning.pytorch.x").info("GPU available: False")
logging.getLogger("lightning.pytorch.x").warning("a real warning")
warnings.warn("Experiment logs directory /x/ exists and is not empty. Previous log files will be deleted")
from tqdm.auto import tqdm
for _ in tqdm(range(3), desc="bar"):
    pass
# a bar asked for explicitly (as `progress=True` callers do) is off too: in a sweep job, tqdm is first
# imported after setup and an explicit `disable=False` beats TQDM_DISABLE
for _ in tqdm(range(3), desc="explicit bar", disable=False):
    pass
assert os.environ["TQDM_DISABLE"] == "1" and not console.progress_bars()
"""
    result = run(["-c", script], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert out.count("a real warning") == 1
    for noise in ("Tip", "GPU available", "exists and is not empty", "bar", "\r"):
        assert noise not in out, noise


def test_a_run_written_to_a_file_says_something_every_30_s(monkeypatch, caplog):
    """Not interactive (a log file, a sweep job): long loops before training (the SFT pool, evaluation) and
    the training steps between the tenth-of-the-run lines log at least every LOG_EVERY_S seconds."""
    from types import SimpleNamespace

    from ablate import console

    clock = iter(range(0, 10_000, 7))  # each look at the clock is 7 s later
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with caplog.at_level("INFO", logger="ablate.train"):
        assert list(console.tracked(range(20), "generating problems", total=20, unit="problems")) == list(range(20))
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all(line.startswith("generating problems: ") and "/20 problems" in line for line in lines)
    assert 4 <= len(lines) <= 5  # 20 items x 7 s = 140 s: one line per 30 s, never one per item
    caplog.clear()
    progress = console.progress_log()
    trainer = SimpleNamespace(global_step=0, max_steps=1000, callback_metrics={})
    with caplog.at_level("INFO", logger="ablate.train"):
        for step in range(1, 21):  # steps 1-20 of 1,000: no tenth reached, 7 s each
            trainer.global_step = step
            progress.on_train_batch_end(trainer, None, None, None, step)
    steps = [r.getMessage() for r in caplog.records]
    assert 4 <= len(steps) <= 5 and all(line.startswith("step ") for line in steps)
