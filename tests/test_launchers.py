"""Sweep launchers (hydra/launcher=local|slurm) and the data-parallel trainer (trainer=ddp)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR

LOCAL_LAUNCHER = "hydra_plugins.ablate_sweeper.joblib_local.LocalJoblibLauncher"


def compose_with_hydra(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def test_slurm_launcher_config_resolves_to_submitit():
    cfg = compose_with_hydra("hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.timeout_min == 240


def test_local_launcher_config_resolves_to_joblib():
    """joblib's launcher, wrapped so that stopping the sweep stops its workers (tests/test_run_ownership.py)."""
    from hydra.utils import get_class

    launcher = compose_with_hydra("hydra/launcher=local", "hydra.launcher.n_jobs=3").hydra.launcher
    assert launcher._target_ == LOCAL_LAUNCHER and launcher.n_jobs == 3 and launcher.backend == "loky"
    # by name: Hydra's plugin scan re-executes plugin modules, so the class objects are not unique
    assert "JoblibLauncher" in [c.__name__ for c in get_class(launcher._target_).__mro__]


def test_sweeps_default_to_the_local_launcher_one_job_per_core(monkeypatch):
    from omegaconf import OmegaConf

    import ablate.config as config

    launcher = compose_with_hydra().hydra.launcher
    assert launcher._target_ == LOCAL_LAUNCHER
    monkeypatch.setattr(config.os, "cpu_count", lambda: 16)
    assert OmegaConf.to_container(launcher, resolve=True)["n_jobs"] == config.MAX_LOCAL_JOBS == 4
    monkeypatch.setattr(config.os, "cpu_count", lambda: 2)
    assert launcher.n_jobs == 2
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert launcher.n_jobs == 1  # with a GPU the jobs would share it
    assert compose_with_hydra("hydra/launcher=basic").hydra.launcher._target_.endswith("BasicLauncher")


def test_threads_are_the_setting_else_every_core_outside_a_sweep(monkeypatch):
    import ablate.config as config

    monkeypatch.setattr(config.os, "cpu_count", lambda: 8)
    assert config.torch_threads(3) == 3 and config.torch_threads(None) == 8  # no Hydra run: all cores


def test_ddp_trainer_config():
    trainer = compose_with_hydra("trainer=ddp").trainer
    assert (trainer.strategy, trainer.devices, trainer.accelerator, trainer.num_nodes) == ("ddp", -1, "gpu", 1)


@pytest.mark.slow
def test_rloo_data_parallel_on_two_cpu_processes(tmp_path):
    """The DDP path without GPUs: two processes, gradients averaged, rank 0 alone writes the run dir."""
    run_dir = tmp_path / "ddp"
    result = subprocess.run(
        [sys.executable, "-m", "ablate.train", "experiment=smoke_rloo", "trainer=ddp", "trainer.accelerator=cpu",
         "trainer.devices=2", "trainer.num_threads=1", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed"
    assert (status["world_size"], status["effective_batch"]) == (2, 2 * 4)  # 2 ranks x stage.batch_prompts
    assert pd.read_csv(run_dir / "metrics.csv")["step"].tolist() == [0, 1, 2]
    assert (run_dir / "eval" / "no_tool" / "summary.json").is_file() and (run_dir / "model" / "config.json").is_file()
    assert result.stdout.count("run directory:") == 1  # the worker process neither exports nor evaluates


def test_local_launcher_comes_with_the_plain_install():
    """hydra/launcher=local needs hydra-joblib-launcher: a core dependency, not an extra (issue 15)."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("hydra-joblib-launcher") for dep in project["dependencies"])
    import hydra_plugins.hydra_joblib_launcher  # noqa: F401 - installed with the core dependencies


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_sweep_that_stats_reads(tmp_path):
    """hydra/launcher=submitit_local (hydra-submitit-launcher, the launchers extra): the SLURM launcher's
    code path with local processes; ~45 s on 2 busy cores, hence slow. tests/test_slurm.py submits to SLURM."""
    from ablate.rundir.status import data_parallel
    from ablate.stats import Settings, analyze, load_sweep

    sweep = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "ablate.train", "-m", "experiment=smoke_rloo", "hydra/launcher=submitit_local",
         "trainer.num_threads=1", "seed=0,1", f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((sweep / ".submitit").iterdir())  # submitit's own folder: its jobs ran there
    conditions = analyze(load_sweep(sweep), Settings(resamples=200)).conditions
    assert {c: [r.seed for r in runs] for c, runs in conditions.usable.items()} == {("experiment=smoke_rloo",): ["0", "1"]}
    assert [data_parallel(r.status) for r in conditions.usable[("experiment=smoke_rloo",)]] == [(1, 4), (1, 4)]


def test_sweeps_run_seed_major_so_no_arm_runs_in_a_block_of_its_own():
    """Every `-m` sweep (the grids sweeper is the default) runs every arm's seed s before any arm's seed s+1:
    Hydra's product order ran `curriculum=a,b seed=0,1` as a0 a1 b0 b1, so a load that changed over the sweep's
    hours fell on one arm. Within a seed the arms keep their order; grids too."""
    from hydra_plugins.ablate_sweeper.grid_sweeper import sweep_jobs

    jobs = sweep_jobs(None, None, ["curriculum=a,b", "seed=0,1,10"])
    assert [(j[0], j[1]) for j in jobs] == [("curriculum=a", "seed=0"), ("curriculum=b", "seed=0"),
                                          ("curriculum=a", "seed=1"), ("curriculum=b", "seed=1"),
                                          ("curriculum=a", "seed=10"), ("curriculum=b", "seed=10")]
    grids = sweep_jobs({"seed": "range(2)"}, [{"arm": "a"}, {"arm": "b,c"}], [])
    assert [sorted(j) for j in grids] == [sorted([f"arm={a}", f"seed={s}"]) for s in (0, 1) for a in "abc"]
    from ablate.config import CONF_DIR

    assert "override hydra/sweeper: grids" in (CONF_DIR / "config.yaml").read_text()
