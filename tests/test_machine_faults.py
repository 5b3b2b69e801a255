"""Damaged starting models and faults of the machine (issue 45, items 2-3): one line naming the file and the
fix, a documented exit code (2: a bad input, found before any compute; 3: the machine), nothing half-written."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.models import resolve_path
from ablate.models.source import model_source_error


@pytest.fixture
def model_copy(tmp_path):
    target = tmp_path / "model"
    shutil.copytree(resolve_path("builtin:tiny-sft"), target)
    return target


@pytest.mark.parametrize("damage,named,what", [
    (lambda d: (d / "model.safetensors").write_bytes(os.urandom(5000)), "model.safetensors", "not a readable safetensors"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:100_000]),
     "model.safetensors", "not a readable safetensors"),
    (lambda d: (d / "config.json").write_text(": : :"), "config.json", "not valid JSON"),
    (lambda d: (d / "tokenizer.json").write_text('{"truncated": '), "tokenizer.json", "not valid JSON"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), "config.json", "not a JSON object"),
    (lambda d: (d / "model.safetensors").unlink(), "no weights", "has config.json but no weights"),
], ids=["random-bytes", "truncated", "config", "tokenizer", "config-list", "no-weights"])
def test_a_damaged_model_directory_is_named_before_any_compute(model_copy, damage, named, what):
    assert model_source_error(str(model_copy)) is None  # the intact copy passes
    damage(model_copy)
    error = model_source_error(str(model_copy))
    assert error is not None and named in error and what in error and "copy the directory again" in error
    assert "\n" not in error


def test_training_from_a_damaged_model_exits_2_with_one_line(model_copy, tmp_path):
    (model_copy / "model.safetensors").write_bytes(os.urandom(5000))
    done = subprocess.run([sys.executable, "-m", "ablate.train", "stage=rloo", "stage.init=model",
                           f"model.name_or_path={model_copy}", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("config error: ") and "model.safetensors" in errors[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_machine_faults_name_the_path_and_the_fix():
    from ablate.train import machine_fault

    full = OSError(errno.ENOSPC, "No space left on device", "/runs/x/checkpoints/last.ckpt")
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = full
    line = machine_fault(wrapped)
    assert line.startswith("No space left on device writing /runs/x/checkpoints/last.ckpt: free space there")
    assert "run the same command again: it resumes" in line
    assert "writable" in machine_fault(OSError(errno.EROFS, "Read-only file system", "/ro/run/status.json"))
    assert machine_fault(OSError(errno.ENOENT, "No such file or directory", "/x")) is None  # not the machine's
    assert machine_fault(ValueError("bad")) is None


def test_a_failed_atomic_write_names_its_file_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    from ablate.rundir import atomic

    def full(_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        atomic.write_text(tmp_path / "status.json", "{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "status.json")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


def test_a_full_disk_ends_a_run_with_exit_3_and_one_line(tmp_path, monkeypatch, capsys):
    """The checkpoint write fails as on a full disk: one line with the path and the fix, exit 3, and
    status.json (written before the disk filled) says failed."""

    from hydra import compose, initialize_config_dir

    from ablate.rundir import atomic
    from ablate.config import CONF_DIR
    from ablate.train import EXIT_MACHINE_FAULT, checked_run

    original = atomic.write_with

    def write_with(path, write, mode="w"):
        if str(path).endswith(".ckpt"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, write, mode)

    monkeypatch.setattr(atomic, "write_with", write_with)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=smoke"])
    with pytest.raises(SystemExit) as stopped:
        checked_run(cfg, tmp_path / "run", sweeping=False, rank0=True)
    assert stopped.value.code == EXIT_MACHINE_FAULT == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: No space left on device writing ") and ".ckpt" in err[-1]
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "failed"


def test_a_damaged_last_checkpoint_resumes_from_the_newest_step_checkpoint_that_reads(tmp_path, caplog):
    import torch

    from ablate.fit import resume_checkpoint

    for step in (2, 4):
        torch.save({"global_step": step}, tmp_path / f"epoch=0-step={step}.ckpt")
    torch.save({"global_step": 4}, tmp_path / "last.ckpt")
    assert resume_checkpoint(tmp_path) == str(tmp_path / "last.ckpt")
    (tmp_path / "last.ckpt").write_bytes((tmp_path / "last.ckpt").read_bytes()[:200])  # a copy cut short
    with caplog.at_level("WARNING", logger="ablate.train"):
        assert resume_checkpoint(tmp_path) == str(tmp_path / "epoch=0-step=4.ckpt")
    assert "last.ckpt did not read" in caplog.text
    (tmp_path / "epoch=0-step=4.ckpt").write_bytes(os.urandom(300))
    assert resume_checkpoint(tmp_path) == str(tmp_path / "epoch=0-step=2.ckpt")
    (tmp_path / "epoch=0-step=2.ckpt").unlink()
    with caplog.at_level("WARNING", logger="ablate.train"):
        assert resume_checkpoint(tmp_path) is None
    assert "starting the run again from step 0" in caplog.text
    assert resume_checkpoint(tmp_path / "absent") is None


def test_a_resume_past_a_damaged_checkpoint_is_kept_with_its_attempt_in_the_history(tmp_path):
    import torch

    from ablate.fit import record_resume
    from ablate.rundir.status import RunStatus

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    status = RunStatus(tmp_path, heartbeat_s=0)
    status.start(stage="sft")
    record_resume(status, checkpoints)  # nothing to resume from: nothing recorded
    assert "resumed_from" not in json.loads((tmp_path / "status.json").read_text())
    status.fail(RuntimeError("killed"))
    torch.save({"global_step": 3}, checkpoints / "epoch=0-step=3.ckpt")
    (checkpoints / "last.ckpt").write_bytes(b"PK\x03\x04 cut short")
    status = RunStatus(tmp_path, heartbeat_s=0)
    status.start(stage="sft")
    record_resume(status, checkpoints)
    resumed = {"checkpoint": "epoch=0-step=3.ckpt", "passed_over": ["last.ckpt"]}
    assert json.loads((tmp_path / "status.json").read_text())["resumed_from"] == resumed
    status.complete()
    RunStatus(tmp_path, heartbeat_s=0).start(stage="sft")  # the next attempt: the resume moves into history
    record = json.loads((tmp_path / "status.json").read_text())
    assert "resumed_from" not in record and [h.get("resumed_from") for h in record["history"]] == [None, resumed]
