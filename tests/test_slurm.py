"""Sweeps and preemption on a real single-node SLURM cluster (.ci/slurm_cluster.sh), slow tier.

The session fixture starts the cluster (installing Debian's packages as root when they are missing) and stops
it after; it is skipped, with the reason, only where it cannot install (not root, no apt-get). CI runs it as
root on a clean machine (.ci/run). What is checked: a study's sweep submitted with hydra/launcher=slurm as a
job array reads in ablate.stats exactly as the same jobs run locally; a run warned by the scheduler
(`scancel --signal`, as `sbatch --signal` does before a time limit) checkpoints the step it is at, requeues
its job and resumes to the numbers of a run never interrupted, with no step redone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ablate.rundir.status import data_parallel

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / ".ci" / "slurm_cluster.sh"
# Jobs of a CPU machine: no GPU, one core each, a small memory request (the node advertises 16 GB)
LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=20"]


def _cluster_up() -> bool:
    return shutil.which("scontrol") is not None and subprocess.run(
        ["scontrol", "ping"], capture_output=True).returncode == 0


def _cluster(command: str, state: Path) -> float:
    clock = time.monotonic()
    done = subprocess.run(["bash", str(CLUSTER), command], env={**os.environ, "ABLATE_SLURM_DIR": str(state)},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stderr.strip(), f"({time.monotonic() - clock:.1f} s)")
    return time.monotonic() - clock


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "SLURM tests start a cluster as root (.ci/slurm_cluster.sh start); not root here"
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return "SLURM tests install Debian's slurm packages with apt-get; no apt-get here"
    return None


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running SLURM with accounting: one already up that this fixture did not start (left running), else
    .ci/slurm_cluster.sh's, started once and stopped by its pid files when the last test process using it
    ends (pytest-xdist workers count themselves in `<state>.users` under a file lock). Skipped only where
    it cannot start one (not root, no apt-get), and never with ABLATE_REQUIRE_SLURM=1 (.ci/run): fails there."""
    from filelock import FileLock

    state = Path(os.environ.get("ABLATE_SLURM_DIR", "/tmp/ablate-slurm"))
    users = Path(f"{state}.users")
    lock = FileLock(f"{state}.lock")
    with lock:
        count = int(users.read_text() or 0) if users.is_file() else 0
        if count and not _cluster_up():
            count = 0  # left by a session that died: its cluster is gone
        ours = count > 0 or not _cluster_up()
        if ours and count == 0:
            why = _unavailable()
            if why:
                if os.environ.get("ABLATE_REQUIRE_SLURM") == "1":
                    pytest.fail(f"ABLATE_REQUIRE_SLURM=1 but {why}")
                pytest.skip(why)
            _cluster("start", state)
        if ours:
            users.write_text(str(count + 1))
    yield
    if ours:
        with lock:
            count = int(users.read_text() or 1) - 1
            users.write_text(str(count))
            if count == 0:
                _cluster("stop", state)
                users.unlink()


def train(*args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate.train", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv")


TRAINED = ["loss", "kl", "reward_mean"]  # per-step numbers that follow the weights and the draws


def assert_same_steps(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The crash-resume standard (tests/crash.py): the same steps, each with the uninterrupted run's numbers."""
    assert got["step"].tolist() == expected["step"].tolist()
    for column in [c for c in expected.columns if c.split("/")[-1] in TRAINED]:
        assert got[column].tolist() == pytest.approx(expected[column].tolist(), rel=1e-5, nan_ok=True), column


def report(sweep: Path, out: Path) -> dict[str, pd.DataFrame]:
    done = subprocess.run([sys.executable, "-m", "ablate.stats", str(sweep), "--out", str(out), "--no-plots",
                           "--quiet", "--resamples", "200"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: pd.read_csv(out / name) for name in ("summary.csv", "runs.csv")}


def test_a_study_sweep_on_slurm_reads_like_the_same_sweep_run_locally(slurm_cluster, tmp_path):
    """hydra/launcher=slurm submits the grid as one job array; the jobs share one upstream SFT (trained by the
    first under the cache's file lock); the report of the SLURM sweep equals the local sweep's."""
    grid = ["experiment=smoke", "stage=rloo", "curriculum=none,static", "seed=0,1", "trainer.num_threads=1"]
    clock = time.monotonic()
    on_slurm = train("-m", *grid, *LAUNCHER, f"hydra.sweep.dir={tmp_path / 'slurm'}")
    slurm_s = time.monotonic() - clock
    assert on_slurm.returncode == 0, on_slurm.stderr[-3000:]
    arrays = list((tmp_path / "slurm" / ".submitit").glob("*_0"))
    assert len(arrays) == 1  # one array: its tasks <job>_0 .. <job>_3
    array = arrays[0].name.split("_")[0]
    states = accounting(f"{array}")
    assert sorted(states) == [f"{array}_{i}" for i in range(4)] and set(states.values()) == {"COMPLETED"}, states
    clock = time.monotonic()
    local = train("-m", *grid, "hydra/launcher=local", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path / 'local'}")
    local_s = time.monotonic() - clock
    assert local.returncode == 0, local.stderr[-3000:]
    print(f"4 jobs: slurm sweep {slurm_s:.1f} s, local sweep (2 jobs at a time) {local_s:.1f} s; "
          f"load {os.getloadavg()[0]:.2f}")
    a, b = report(tmp_path / "slurm", tmp_path / "report-slurm"), report(tmp_path / "local", tmp_path / "report-local")
    assert (a["runs.csv"]["outcome"] == "ok").sum() == 4
    assert (a["summary.csv"]["value"].abs() > 0).sum() >= 10  # coverage, lengths, verdict rates: not all zero
    pd.testing.assert_frame_equal(a["summary.csv"], b["summary.csv"])
    curves = [pd.read_csv(tmp_path / f"report-{where}" / "curves.csv.gz") for where in ("slurm", "local")]
    trained = [c[~c["metric"].str.startswith("time/")].reset_index(drop=True) for c in curves]  # not the clock's
    assert len(trained[0]) > 100
    pd.testing.assert_frame_equal(*trained)
    starts = set()
    for job in range(4):
        assert_same_steps(metrics(tmp_path / "slurm" / str(job)), metrics(tmp_path / "local" / str(job)))
        starts |= {status(tmp_path / where / str(job))["init_sha256"] for where in ("slurm", "local")}
        assert data_parallel(status(tmp_path / "slurm" / str(job))) == (1, 4)  # one process x stage.batch_prompts
    assert len(starts) == 1  # the eight runs started from one upstream SFT, trained once under the cache's lock


def accounting(job: str, wait_s: float = 30) -> dict[str, str]:
    """sacct's state of each task of `job` (an array: <job>_<task>), polled: a job reaches the accounting a
    moment after it ends."""
    deadline = time.monotonic() + wait_s
    while True:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State"], capture_output=True,
                             text=True, timeout=30).stdout
        states = dict(line.split("|", 1) for line in out.split() if "|" in line)
        if states and all(s in ("COMPLETED", "FAILED", "CANCELLED") for s in states.values()) or \
                time.monotonic() > deadline:
            return states
        time.sleep(1)


def wait_until(check, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


LONG_RUN = ["experiment=smoke_rloo", "stage.max_steps=200", "stage.checkpoint_every=1000", "trainer.num_threads=1"]


def preempt_and_time(job: str, run_dir: Path, signal: list[str]) -> dict[str, float]:
    """Once the run trains (metrics.csv is flushed every 10 steps), send the scheduler's warning; return the
    seconds from the signal to the requeue and to the resumed attempt's start."""
    wait_until(lambda: (run_dir / "metrics.csv").is_file(), 300, "the run did not start training")
    clock = time.monotonic()
    subprocess.run(["scancel", *signal, job], check=True, timeout=30)
    wait_until(lambda: status(run_dir).get("state") == "interrupted", 60, "the warned run did not stop")
    stopped = time.monotonic() - clock
    wait_until(lambda: status(run_dir).get("attempts") == 2, 120, "the requeued job did not start again")
    return {"stopped_s": stopped, "resumed_s": time.monotonic() - clock}


def check_resumed_exactly(run_dir: Path, expected: pd.DataFrame, log: str) -> None:
    done = status(run_dir)
    assert done["state"] == "completed" and done["attempts"] == 2, done
    assert [h["state"] for h in done["history"]] == ["interrupted"] and "SIGUSR" in done["history"][0]["error"]
    assert_same_steps(metrics(run_dir), expected)
    # the warned step was checkpointed (stage.checkpoint_every=1000 saves nothing on its own): no step redone
    stop_step = int(log.split("checkpointed step ")[1].split()[0].rstrip(":"))
    assert 0 < stop_step < 200 and f"resuming from {run_dir / 'checkpoints' / 'last.ckpt'}" in log


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> pd.DataFrame:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    done = train(*LONG_RUN, f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    return metrics(run_dir)


def test_an_sbatch_run_warned_by_usr1_checkpoints_requeues_and_resumes_exactly(slurm_cluster, tmp_path,
                                                                               uninterrupted):
    """A plain sbatch job (`exec python -m ablate.train ...`): USR1 to its batch shell, as
    `sbatch --signal=B:USR1@120` sends it before the time limit."""
    run_dir, out = tmp_path / "run", tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --requeue --open-mode=append --output={out} --cpus-per-task=1\n"
                      f"exec {sys.executable} -m ablate.train {' '.join(LONG_RUN)} hydra.run.dir={run_dir}\n")
    job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True,
                         timeout=30).stdout.strip()
    times = preempt_and_time(job, run_dir, ["--signal=USR1", "--batch"])
    wait_until(lambda: status(run_dir).get("state") == "completed", 300, "the resumed run did not complete")
    log = out.read_text()
    print(f"sbatch job {job}: USR1 -> stopped {times['stopped_s']:.1f} s -> resumed {times['resumed_s']:.1f} s; "
          f"load {os.getloadavg()[0]:.2f}")
    assert "requeued SLURM job" in log
    check_resumed_exactly(run_dir, uninterrupted, log)
    assert accounting(job) == {job: "COMPLETED"}


def test_a_slurm_launcher_job_warned_by_usr2_resumes_and_its_sweep_returns(slurm_cluster, tmp_path, uninterrupted):
    """hydra/launcher=slurm: submitit's jobs get USR2 `hydra.launcher.signal_delay_s` before their time limit.
    The warned job checkpoints and requeues itself; the sweep waiting on it returns once the resumed job is done."""
    sweep = tmp_path / "sweep"
    launcher = subprocess.Popen([sys.executable, "-m", "ablate.train", "-m", *LONG_RUN, *LAUNCHER,
                                 f"hydra.sweep.dir={sweep}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    try:
        # one job: submitit submits it alone, not as an array of one
        submitted = wait_until(lambda: [p.parent for p in (sweep / ".submitit").glob("*/*_submitted.pkl")], 120,
                               "no job submitted")
        job = submitted[0].name
        times = preempt_and_time(job, sweep / "0", ["--signal=USR2"])  # to the job's steps, as --signal=USR2@120
        output, _ = launcher.communicate(timeout=600)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, output[-3000:]
    log = "".join(p.read_text() for p in sorted(submitted[0].glob("*_log.*")))
    print(f"slurm launcher job {job}: USR2 -> stopped {times['stopped_s']:.1f} s -> resumed "
          f"{times['resumed_s']:.1f} s; load {os.getloadavg()[0]:.2f}")
    assert "requeued SLURM job" in log
    check_resumed_exactly(sweep / "0", uninterrupted, log)
