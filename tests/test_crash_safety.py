"""Crash safety of the run directory (issue 15): every file a reader trusts is whole or absent, a
killed attempt is recorded and told from a running one, a directory never misdescribes its results,
and `ablate.stats` leaves out runs that do not cover their prompts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

from ablate.rundir.atomic import checkpoint_io, model_exported, remove_orphans, write_jsonl
from ablate.rundir.status import RunStatus, interrupted, read_status


class Unserializable:
    pass


def test_samples_jsonl_is_whole_or_absent(tmp_path):
    from ablate.eval import write_eval

    rows = [{"id": str(i), "n": 1, "n_correct": 0} for i in range(10)]
    write_eval(tmp_path, "no_tool", {"n_prompts": 10}, rows)
    before = (tmp_path / "eval" / "no_tool" / "samples.jsonl").read_bytes()
    broken = rows[:5] + [{"id": "x", "bad": Unserializable()}] + rows[5:]  # dies halfway through the file
    with pytest.raises(TypeError):
        write_eval(tmp_path, "no_tool", {"n_prompts": 11}, broken)
    assert (tmp_path / "eval" / "no_tool" / "samples.jsonl").read_bytes() == before
    assert json.loads((tmp_path / "eval" / "no_tool" / "summary.json").read_text())["n_prompts"] == 10
    assert sorted(p.name for p in (tmp_path / "eval" / "no_tool").iterdir()) == ["samples.jsonl", "summary.json"]
    with pytest.raises(TypeError):
        write_jsonl(tmp_path / "fresh.jsonl", broken)
    assert not (tmp_path / "fresh.jsonl").exists() and list(tmp_path.glob("fresh*")) == []


def test_orphans_of_dead_writers_are_removed(tmp_path):
    (tmp_path / "last.ckpt.tmp-999999999").write_bytes(b"half")
    (tmp_path / "model.tmp-999999999").mkdir()
    (tmp_path / f"summary.json.tmp-{os.getppid()}").write_text("{")  # a live process's: kept
    (tmp_path / "last.ckpt").write_bytes(b"whole")
    removed = {p.name for p in remove_orphans(tmp_path)}
    assert removed == {"last.ckpt.tmp-999999999", "model.tmp-999999999"}
    assert (tmp_path / "last.ckpt").read_bytes() == b"whole"


def test_checkpoints_are_saved_atomically_in_their_own_directory(tmp_path, monkeypatch):
    import tempfile

    def no_tmpdir(*args, **kwargs):
        raise AssertionError("a checkpoint save must not go through $TMPDIR")

    monkeypatch.setattr(tempfile, "mkstemp", no_tmpdir)
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_tmpdir)
    io = checkpoint_io()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"state": [1, 2, 3]}, path)
    assert io.load_checkpoint(path)["state"] == [1, 2, 3]
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def test_model_export_is_all_or_nothing(tmp_path, tiny_policy, monkeypatch):
    from ablate.rundir.atomic import export_model

    model, tokenizer = tiny_policy
    target = tmp_path / "model"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed between the weights and the tokenizer")

    monkeypatch.setattr(type(tokenizer), "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        export_model(model, tokenizer, target)
    assert not target.exists() and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    export_model(model, tokenizer, target)
    assert model_exported(target) and (target / "tokenizer.json").is_file()
    # an export an older version left half-written (config.json, no weights) is not taken as done
    (target / "model.safetensors").unlink()
    assert not model_exported(target)


def test_status_keeps_every_attempt_and_beats(tmp_path):
    first = RunStatus(tmp_path, heartbeat_s=0.05)
    first.start(stage="sft")
    first.timing("train_s", 2.0)
    time.sleep(0.2)
    beat = read_status(tmp_path)["heartbeat_at"]
    assert beat and read_status(tmp_path)["pid"] == os.getpid()
    first._stop.set()  # killed: no fail(), no complete()
    second = RunStatus(tmp_path, heartbeat_s=0)
    second.start(stage="sft")
    second.timing("train_s", 3.0)
    second.fail(RuntimeError("boom"))
    third = RunStatus(tmp_path, heartbeat_s=0)
    third.start(stage="sft")
    third.timing("eval_no_tool_s", 1.0)
    third.complete()
    status = read_status(tmp_path)
    assert status["attempts"] == 3 and status["state"] == "completed"
    assert [h["state"] for h in status["history"]] == ["interrupted", "failed"]
    assert status["history"][0]["timings"] == {"train_s": 2.0} and "boom" in status["history"][1]["error"]
    assert status["timings_total"] == {"train_s": 5.0, "eval_no_tool_s": 1.0}
    assert status["total_duration_s"] >= status["duration_s"]


def test_interrupted_is_told_from_running():
    host = socket.gethostname()
    now = time.time()
    from datetime import datetime, timezone

    def iso(t):
        return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")

    alive = {"state": "running", "host": host, "pid": os.getpid(), "heartbeat_at": iso(now)}
    assert interrupted(alive, now) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {**alive, "pid": int(dead.stdout)}
    assert "process" in interrupted(gone, now)
    elsewhere = {"state": "running", "host": "other-host", "pid": 1, "heartbeat_at": iso(now - 3600)}
    assert "no heartbeat" in interrupted(elsewhere, now)
    assert interrupted({**elsewhere, "heartbeat_at": iso(now - 10)}, now) is None
    assert interrupted({"state": "completed"}, now) is None


def test_stats_lists_killed_and_incomplete_runs(tmp_path):
    import numpy as np
    from stats_fixtures import write_sweep

    from ablate.stats.read.load import load_sweep

    root = write_sweep(tmp_path / "sweep", {"none": 0.3, "static": 0.5}, seeds=(0, 1, 2), n_prompts=60)
    killed = root / "1"
    status = json.loads((killed / "status.json").read_text())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    status.update(state="running", host=socket.gethostname(), pid=int(dead.stdout))
    (killed / "status.json").write_text(json.dumps(status))
    short = root / "4" / "eval" / "default" / "samples.jsonl"  # 7 of 60 prompts, summary says 60
    short.write_text("".join(short.read_text().splitlines(keepends=True)[:7]))
    both = root / "5" / "eval" / "default"  # 7 prompts and a summary that agrees: fewer than its seeds
    both.joinpath("samples.jsonl").write_text("".join(both.joinpath("samples.jsonl").read_text().splitlines(keepends=True)[:7]))
    summary = json.loads(both.joinpath("summary.json").read_text())
    both.joinpath("summary.json").write_text(json.dumps({**summary, "n_prompts": 7}))
    runs = {r.path.name: r for r in load_sweep(root).runs}
    assert runs["1"].state == "interrupted" and runs["1"].outcome == "failed" and "interrupted" in runs["1"].reason
    assert runs["4"].outcome == "missing" and "covers 7 of 60" in runs["4"].reason
    assert runs["5"].outcome == "missing" and "incomplete" in runs["5"].reason
    assert [r.outcome for name, r in sorted(runs.items()) if name not in ("1", "4", "5")] == ["ok"] * 3
    assert np.isfinite(len(runs))


def test_test_size_from_the_config_bounds_coverage(tmp_path):
    from stats_fixtures import write_sweep

    from ablate.stats.read.load import load_sweep

    root = write_sweep(tmp_path / "sweep", {"none": 0.3}, seeds=(0,), n_prompts=20)
    config = root / "0" / ".hydra" / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "task": {"test_size": 500}}))
    (run,) = load_sweep(root).runs
    assert run.outcome == "missing" and "covers 20 of 500" in run.reason
    # eval.limit (smoke_study) evaluates the first prompts on purpose: a run that covers them is whole
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "eval": {"limit": 20}}))
    (run,) = load_sweep(root).runs
    assert run.outcome == "ok", run.reason
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "eval": {"limit": 64}}))
    (run,) = load_sweep(root).runs
    assert run.outcome == "missing" and "covers 20 of 64" in run.reason


def test_lock_wait_is_announced(tmp_path, caplog):
    from filelock import FileLock

    from ablate.upstream import wait_for_lock

    path = str(tmp_path / "x.lock")
    held = threading.Event()

    def hold():  # another job (here a thread) trains the upstream for half a second
        with FileLock(path):
            held.set()
            time.sleep(0.5)

    threading.Thread(target=hold).start()
    held.wait()
    waiter = FileLock(path)
    with caplog.at_level("INFO", logger="ablate.upstream"):
        wait_for_lock(waiter, "waiting for another job that is training upstream sft")
    assert "waiting for another job" in caplog.text
    waiter.release()


def _train(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ablate.train", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_rerun_with_another_config_is_refused_and_the_directory_untouched(tmp_path):
    run_dir = tmp_path / "run"
    args = ["experiment=smoke", "trainer.num_threads=1", f"hydra.run.dir={run_dir}"]
    first = _train(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    snapshot = {p: p.read_bytes() for p in [*(run_dir / ".hydra").iterdir(), run_dir / "status.json"]}
    other = _train(*args, "stage.lr=1e-2", "seed=3", cwd=tmp_path)
    assert other.returncode == 2, other.stderr[-3000:]
    assert "stage.lr" in other.stderr and "seed" in other.stderr and "Traceback" not in other.stderr
    assert {p: p.read_bytes() for p in snapshot} == snapshot
    same = _train(*args, "trainer.num_threads=2", cwd=tmp_path)  # a key that changes no result: the same run
    assert same.returncode == 0 and "already completed" in same.stdout


@pytest.mark.slow
def test_a_half_written_export_is_redone(tmp_path):
    """What a kill between model/config.json and the weights left before exports were atomic: the
    next attempt trains on from its checkpoint and exports again instead of failing forever."""
    from test_train import compose_cfg

    from ablate.run import run

    run_dir = tmp_path / "run"
    run(compose_cfg(), run_dir)
    (run_dir / "model" / "model.safetensors").unlink()
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "state": "running"}))
    run(compose_cfg(), run_dir)
    status = read_status(run_dir)
    assert status["state"] == "completed" and status["attempts"] == 2 and model_exported(run_dir / "model")
    assert status["history"][0]["state"] == "interrupted"


def test_training_time_and_cpu_time_carry_across_a_resume():
    from ablate.lit.elapsed import ElapsedTime

    first, checkpoint = ElapsedTime(), {}
    sum(i * i for i in range(200_000))  # some CPU work in this attempt
    first.on_save_checkpoint(None, None, checkpoint)
    assert checkpoint["cpu_s"] > 0 and checkpoint["elapsed_s"] > 0
    resumed = ElapsedTime()
    resumed.on_load_checkpoint(None, None, checkpoint)
    resumed.on_train_start(None, None)
    assert resumed.cpu() >= checkpoint["cpu_s"] and resumed.elapsed() >= checkpoint["elapsed_s"]
    assert ElapsedTime().cpu() < checkpoint["cpu_s"] + resumed.cpu()  # a fresh run starts from its own zero
