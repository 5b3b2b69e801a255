"""One live owner per run directory, and sweeps that stop when they are stopped (issue 32).

The end-to-end tests hold the file lock of the upstream SFT that `experiment=smoke stage=rloo` trains
first (ablate.upstream): a launch then waits there, owning its run directory with status.json saying
running, for as long as the test needs it to, and goes on when the test lets go."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ablate.rundir import RunDir
from ablate.rundir.ownership import RunOwned, owned
from ablate.rundir.status import STALE_S, RunStatus, read_status

sys.path.insert(0, str(Path(__file__).parent / "goldens"))
from record import numbers_of_run  # noqa: E402 - every number of a run but wall-clock ones

RLOO = ["experiment=smoke", "stage=rloo", "trainer.num_threads=1"]
SRC = str(Path(__file__).resolve().parents[1] / "src")


def python(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")},
                            **kwargs)


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def iso(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, timezone.utc).isoformat(timespec="seconds")


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        from ablate.rundir.atomic import pid_alive

        return pid_alive(pid) and not Path("/proc").is_dir()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_a_second_owner_is_refused_naming_the_first_and_the_way_out(tmp_path):
    holder = python(f"from ablate.rundir.ownership import claim; claim({str(tmp_path)!r}); print('held', flush=True); "
                    "input()", stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(RunOwned) as refused:
            with owned(tmp_path):
                pass
        message = str(refused.value)
        assert f"pid {holder.pid} on {socket.gethostname()}, running it since 20" in message
        assert f"kill {holder.pid}" in message and "hydra.run.dir" in message and str(tmp_path) in message
    finally:
        holder.stdin.close()
        holder.wait(10)
    with owned(tmp_path):  # its process is gone: so is its lock
        with owned(tmp_path):  # re-entrant in one process (run() inside the entry point)
            assert json.loads(RunDir(tmp_path).lock_file.read_text())["pid"] == os.getpid()
    assert RunDir(tmp_path).lock_file.read_text() == ""  # released: it names no one


def _running(tmp_path, **fields) -> None:
    status = {"state": "running", "started_at": iso(3600), "heartbeat_at": iso(5), "attempts": 1,
              "host": socket.gethostname(), "pid": os.getpid(), "timings": {"train_s": 4.0}, "history": []}
    (tmp_path / "status.json").write_text(json.dumps({**status, **fields}))


def test_a_stale_owner_is_taken_over_and_the_takeover_recorded(tmp_path):
    gone = dead_pid()
    _running(tmp_path, pid=gone)
    with owned(tmp_path):
        status = RunStatus(tmp_path, heartbeat_s=0)
        status.start(stage="rloo")
        status.complete()
    (last,) = read_status(tmp_path)["history"]
    assert last["state"] == "interrupted" and last["pid"] == gone and last["timings"] == {"train_s": 4.0}
    takeover = last["takeover"]
    assert takeover["pid"] == os.getpid() and takeover["host"] == socket.gethostname()
    assert f"process {gone}" in takeover["reason"] and "gone" in takeover["reason"]
    # on another host only the heartbeat tells: older than STALE_S is taken over, newer is refused
    _running(tmp_path, host="elsewhere", pid=1, heartbeat_at=iso(STALE_S + 60))
    with owned(tmp_path):
        assert "no heartbeat" in read_status(tmp_path)["takeover"]["reason"]
    _running(tmp_path, host="elsewhere", pid=1, heartbeat_at=iso(30))
    before = (tmp_path / "status.json").read_bytes()
    with pytest.raises(RunOwned, match="pid 1 on elsewhere.*lapses 10 min"):
        with owned(tmp_path):
            pass
    assert (tmp_path / "status.json").read_bytes() == before


def test_a_live_pid_that_does_not_hold_the_lock_is_not_the_owner(tmp_path):
    """On this host the lock decides: a status naming a live process (here this one, as after the pid
    was reused) whose claim is gone is stale."""
    _running(tmp_path)
    with owned(tmp_path):
        assert "no longer holds run.lock" in read_status(tmp_path)["takeover"]["reason"]


STOPPABLE = """
import sys, time
from ablate.rundir.status import RunStatus
from ablate.stopping import stop_on_signals
with stop_on_signals(watch_parent=True), RunStatus(sys.argv[1], heartbeat_s=0).running(stage="x"):
    print("running", flush=True)
    time.sleep(60)
"""


def test_a_signal_marks_the_run_interrupted(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", STOPPABLE, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": SRC})
    assert job.stdout.readline().strip() == "running"
    job.send_signal(signal.SIGINT)
    assert job.wait(10) == 128 + signal.SIGINT
    status = read_status(tmp_path)
    assert status["state"] == "interrupted" and status["error"] == "stopped by SIGINT"


def test_stats_lists_a_stopped_run_as_interrupted(tmp_path):
    from stats_fixtures import write_sweep

    from ablate.stats.read.load import load_run

    root = write_sweep(tmp_path / "sweep", {"none": 0.3}, seeds=(0, 1), n_prompts=20)
    status = read_status(root / "1")
    (root / "1" / "status.json").write_text(json.dumps({**status, "state": "interrupted",
                                                        "error": "stopped by SIGTERM"}))
    run = load_run(root / "1", root)
    assert (run.state, run.outcome, run.reason) == ("interrupted", "failed", "interrupted: stopped by SIGTERM")
    assert load_run(root / "0", root).outcome == "ok"


def test_a_sweep_worker_stops_when_its_parent_is_killed(tmp_path):
    """SIGKILL leaves the parent no chance to stop its workers: each notices it is gone and stops itself."""
    parent = python(f"import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', {STOPPABLE!r}, "
                    f"{str(tmp_path)!r}], stdout=subprocess.DEVNULL); print(child.pid, flush=True); child.wait()")
    worker = int(parent.stdout.readline())
    wait_for(lambda: (read_status(tmp_path) or {}).get("state") == "running", 30, "the worker to start")
    parent.kill()
    parent.wait(10)
    clock = time.monotonic()
    wait_for(lambda: not alive(worker), 10, "the orphaned worker to stop")
    print(f"orphaned worker gone {time.monotonic() - clock:.1f} s after its parent was killed")
    assert read_status(tmp_path)["state"] == "interrupted"


@pytest.mark.slow
def test_a_stop_between_a_checkpoint_and_its_metrics_row_loses_no_row(tmp_path, monkeypatch):
    """Lightning saves step n's checkpoint before it logs step n's row, and a resume starts after the
    checkpoint: a signal right after the save must wait for the row (here: sent from inside the save)."""
    import pandas as pd
    from hydra import compose, initialize_config_dir
    from lightning.pytorch.callbacks import ModelCheckpoint

    from ablate.config import CONF_DIR
    from ablate.stopping import stop_on_signals, stop_signal
    from ablate.run import run

    def compose_cfg():  # RLOO: its resume is exact (an SFT resume starts its epoch's batches over)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=["experiment=smoke_rloo", "stage.max_steps=6",
                                                             "stage.checkpoint_every=3"])

    run(compose_cfg(), tmp_path / "alone")
    save = ModelCheckpoint._save_checkpoint
    for signum in (signal.SIGTERM, signal.SIGINT):  # Lightning handles a SIGTERM in fit too; not a SIGINT
        def save_then_signal(self, trainer, filepath):
            save(self, trainer, filepath)
            if trainer.global_step == 3:
                os.kill(os.getpid(), signum)

        monkeypatch.setattr(ModelCheckpoint, "_save_checkpoint", save_then_signal)
        run_dir = tmp_path / signal.Signals(signum).name
        with stop_on_signals(), pytest.raises(SystemExit) as stopped:
            run(compose_cfg(), run_dir)
        assert stop_signal(stopped.value) == signum
        assert read_status(run_dir)["state"] == "interrupted"
        assert pd.read_csv(run_dir / "metrics.csv")["step"].tolist() == [0, 1, 2]
        monkeypatch.undo()
        run(compose_cfg(), run_dir)
        assert same_numbers(run_dir, tmp_path / "alone")


def hold_upstream(tmp_path, monkeypatch):
    """The upstream SFT's lock, held: RLOO launches wait for it, owning their run directories (a
    private cache, so that no other test's upstream is already there)."""
    from filelock import FileLock
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.rundir.cache import models_dir
    from ablate.upstream import upstream_key

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=RLOO)
    models_dir().mkdir(parents=True)
    gate = FileLock(f"{models_dir() / upstream_key(cfg, 'sft')}.lock")
    gate.acquire()
    return gate


def train(*args, cwd: Path, wait: bool = True):
    command = [sys.executable, "-m", "ablate.train", *args]
    if wait:
        return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)
    log = open(cwd / f"launch-{time.monotonic_ns()}.log", "w")  # not a pipe: nobody reads it while it runs
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)


def running_jobs(sweep: Path, jobs: str) -> dict[str, int] | None:
    """{job: pid} once every job's status says running."""
    statuses = {job: read_status(sweep / job) or {} for job in jobs}
    if all(s.get("state") == "running" for s in statuses.values()):
        return {job: s["pid"] for job, s in statuses.items()}
    return None


def same_numbers(a: Path, b: Path) -> bool:
    return json.dumps(numbers_of_run(a), sort_keys=True) == json.dumps(numbers_of_run(b), sort_keys=True)


@pytest.mark.slow
def test_a_second_launch_is_refused_and_the_first_run_untouched(tmp_path, monkeypatch):
    gate = hold_upstream(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    first = train(*RLOO, f"hydra.run.dir={run_dir}", cwd=tmp_path, wait=False)
    lone = train(*RLOO, f"hydra.run.dir={tmp_path / 'lone'}", cwd=tmp_path, wait=False)  # the same run, alone
    try:
        wait_for(lambda: (read_status(run_dir) or {}).get("pid") == first.pid, 120, "the first launch to start")
        hydra_files = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
        # the same run with a key that changes no result: Hydra rewrites .hydra/ before ablate runs
        second = train(*RLOO, "trainer.num_threads=2", f"hydra.run.dir={run_dir}", cwd=tmp_path)
        assert first.poll() is None  # refused at once, not after the first ended
    finally:
        gate.release()
    assert second.returncode == 2, second.stderr[-3000:]
    assert (f"error: run directory {run_dir} is in use by another process (pid {first.pid} on "
            f"{socket.gethostname()}, running it since ") in second.stderr and "Traceback" not in second.stderr
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == hydra_files
    assert first.wait(300) == 0
    status = read_status(run_dir)
    assert status["state"] == "completed" and status["attempts"] == 1 and status["history"] == []
    assert lone.wait(300) == 0
    assert same_numbers(run_dir, tmp_path / "lone")


def local_sweep(sweep: Path, *extra: str) -> list[str]:
    return ["-m", *RLOO, *extra, "seed=0,1", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}"]


@pytest.mark.slow
def test_a_sweep_relaunched_while_running_skips_its_jobs_and_stopped_leaves_no_worker_and_resumes(tmp_path, monkeypatch):
    """What a user who forgot a sweep in the background does: launches it again (its jobs in flight are
    skipped), stops the first (SIGTERM to the sweep: no worker may go on training), runs it again
    (it resumes, to the numbers of the same jobs never stopped)."""
    from ablate.stopping import STOP_GRACE_S

    gate = hold_upstream(tmp_path, monkeypatch)
    sweep, longer = tmp_path / "sweep", ("stage.max_steps=24", "stage.checkpoint_every=2")
    first = train(*local_sweep(sweep, *longer), cwd=tmp_path, wait=False)
    lone = train(*local_sweep(tmp_path / "lone", *longer)[:-3], "hydra/launcher=basic",  # the same jobs, never stopped
                 f"hydra.sweep.dir={tmp_path / 'lone'}", cwd=tmp_path, wait=False)
    try:
        workers = wait_for(lambda: running_jobs(sweep, "01"), 120, "both jobs to start")
        again = train(*local_sweep(sweep, *longer), cwd=tmp_path)
        assert first.poll() is None
    finally:
        gate.release()
    assert again.returncode == 0, again.stderr[-3000:]
    for job, pid in workers.items():
        assert (f"skipped: run directory {sweep / job} is in use by another process (pid {pid} on "
                f"{socket.gethostname()}, a job of sweep {first.pid}, running it since ") in again.stderr
    assert "2 of 2 jobs skipped" in again.stdout + again.stderr

    wait_for(lambda: all((sweep / job / "checkpoints" / "last.ckpt").is_file() for job in workers), 120,
             "both jobs to write a checkpoint")
    clock = time.monotonic()
    first.send_signal(signal.SIGTERM)
    assert first.wait(STOP_GRACE_S + 30) == 128 + signal.SIGTERM
    wait_for(lambda: not any(alive(pid) for pid in workers.values()), 5, "the workers to be gone")
    print(f"sweep and workers gone {time.monotonic() - clock:.2f} s after SIGTERM to the sweep; checkpoints then:",
          {job: sorted(p.name for p in (sweep / job / "checkpoints").iterdir()) for job in workers})
    for job in workers:
        status = read_status(sweep / job)
        assert status["state"] == "interrupted" and status["error"] == "stopped by SIGTERM", status
        assert status["attempts"] == 1  # the skipped launch left no attempt behind

    resumed = train(*local_sweep(sweep, *longer), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert lone.wait(300) == 0
    for job in workers:
        status = read_status(sweep / job)
        assert status["state"] == "completed" and [h["state"] for h in status["history"]] == ["interrupted"]
        assert same_numbers(sweep / job, tmp_path / "lone" / job), job
