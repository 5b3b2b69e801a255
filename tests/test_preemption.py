"""The scheduler's warning under SLURM (ablate.stopping.PREEMPT_SIGNALS), in-process and without a cluster:
the run finishes the step, checkpoints it, stops after its row and resumes to the numbers of a run never
warned. tests/test_slurm.py does the same through a real SLURM, with the requeue."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.rundir.status import read_status
from ablate.stopping import Stopped, preempted, requeue_job, stop_on_signals

OVERRIDES = ["experiment=smoke_rloo", "trainer.num_threads=1", "stage.max_steps=5", "stage.checkpoint_every=100"]


def cfg():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=OVERRIDES)


@pytest.fixture
def under_slurm(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    for key in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)


def test_a_warned_run_checkpoints_its_step_stops_after_its_row_and_resumes_exactly(tmp_path, monkeypatch, under_slurm,
                                                                                   caplog):
    from ablate.lit.rloo import RLOOModule
    from ablate.train import run

    torch.set_num_threads(1)
    with stop_on_signals():
        run(cfg(), tmp_path / "never")
    expected = pd.read_csv(tmp_path / "never" / "metrics.csv")

    original = RLOOModule.training_step

    def warned(self, batch, batch_idx):
        if self.global_step == 1:
            os.kill(os.getpid(), signal.SIGUSR1)  # mid-step, as SLURM's warning comes whenever it comes
        return original(self, batch, batch_idx)

    monkeypatch.setattr(RLOOModule, "training_step", warned)
    warned_dir = tmp_path / "warned"
    with pytest.raises(Stopped) as stop, stop_on_signals():
        run(cfg(), warned_dir)
    assert stop.value.signum == signal.SIGUSR1 and preempted(stop.value.signum)
    assert pd.read_csv(warned_dir / "metrics.csv")["step"].tolist() == [0, 1]  # the warned step's row is there
    checkpoint = torch.load(warned_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 2  # checkpoint_every=100 saves nothing by itself: the warning's save
    assert read_status(warned_dir)["state"] == "interrupted"
    assert read_status(warned_dir)["error"] == "stopped by SIGUSR1"

    monkeypatch.setattr(RLOOModule, "training_step", original)
    with caplog.at_level("INFO", logger="ablate.train"), stop_on_signals():
        run(cfg(), warned_dir)
    assert f"resuming from {warned_dir / 'checkpoints' / 'last.ckpt'}" in caplog.text
    again = pd.read_csv(warned_dir / "metrics.csv")
    assert again["step"].tolist() == expected["step"].tolist() == [0, 1, 2, 3, 4]
    for column in ("train/loss", "train/kl"):
        assert again[column].tolist() == pytest.approx(expected[column].tolist(), rel=1e-5), column
    assert [h["state"] for h in read_status(warned_dir)["history"]] == ["interrupted"]


def test_outside_slurm_usr1_and_usr2_are_left_alone(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not preempted(signal.SIGUSR1)
    before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)
    with stop_on_signals():
        assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)) == before
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    with stop_on_signals():
        assert signal.getsignal(signal.SIGUSR1) is signal.getsignal(signal.SIGTERM)  # the stop handler
    assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)) == before  # restored


def test_requeue_names_the_job_and_the_fix_when_it_cannot(monkeypatch, tmp_path, under_slurm):
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    assert requeue_job().startswith("could not requeue SLURM job 77_3")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'scontrol: error: Requested operation is presently disabled for job 77_3' >&2\n"
                        "exit 1\n")
    scontrol.chmod(0o755)
    line = requeue_job()
    assert "SLURM refused to requeue job 77_3 (scontrol: error: Requested operation is presently disabled" in line
    assert "sbatch --requeue" in line and "\n" not in line
    scontrol.write_text("#!/bin/sh\n[ \"$1 $2\" = 'requeue 77_3' ] || exit 3\n")
    assert requeue_job() == "requeued SLURM job 77_3: it resumes from its checkpoint when it starts again"
