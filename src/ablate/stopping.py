"""Stopping a run, or a local sweep, on SIGTERM / SIGINT so that every run stays resumable.

A run (one launch, or one job of a sweep) turns the first SIGTERM or SIGINT into `Stopped`, raised in
its main thread wherever it is (checkpoints and every trusted file are written atomically, so what is
on disk is whole; the step under way is redone on resume), except from a step's checkpoint to its
metrics row, where it waits for the row (`step_boundaries`). `RunStatus.running` records the attempt
`interrupted`, the process exits 128 + the signal's number, and re-running the same command resumes
the run. Without this a SIGTERM outside Lightning's fit killed the run with status.json still saying
running, and one inside it ended in Lightning's SIGTERMException, recorded as a failure.

Under SLURM the scheduler's warning before it ends a job (`sbatch --signal=USR1@120`; hydra/launcher=slurm's
jobs get USR2 `hydra.launcher.signal_delay_s` before their time limit) is a preemption, `PREEMPT_SIGNALS`: a
run in training finishes the step under way, checkpoints it (`last.ckpt`), logs its row and stops there
(`Stopped`, recorded `interrupted`); the entry point then requeues its job (`requeue_job`), which resumes from
that checkpoint with no step redone. Outside training such a signal stops the run at once, as SIGTERM does.

The parent of a local (joblib) sweep runs no job itself: its workers do, in processes of their own
that a signal to the parent never reaches. `stop_workers` sends each of them SIGTERM, waits up to
STOP_GRACE_S for them to record their runs and exit, and kills what is left. A worker whose parent
vanished without that (SIGKILL, the OOM killer) notices within PARENT_POLL_S and stops itself alike.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import wait
from typing import Iterator

log = logging.getLogger("ablate.stopping")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
PREEMPT_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)  # under SLURM: checkpoint the step, stop, requeue
STOP_GRACE_S = 30.0  # how long a stopped sweep waits for its workers to record their runs before killing them
PARENT_POLL_S = 1.0  # how often a sweep worker checks that its parent is still there


class Stopped(SystemExit):
    """SIGTERM or SIGINT reached a run: it stops where it is and is recorded as interrupted. A SystemExit
    (exit status 128 + signal) so that nothing that handles Exception swallows it."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


class _Signals:
    """What the handler of `stop_on_signals` knows: whether a stop is under way, or held back until
    the step being checkpointed is logged (`step_boundaries`)."""

    def __init__(self):
        self.stopping = False  # Stopped raised: later signals are ignored while it unwinds
        self.holding = False  # between a step's checkpoint and its metrics row
        self.pending: int | None = None  # a signal held back
        self.preempt: int | None = None  # a preemption signal (SLURM's warning) waiting for the step's end
        self.training = False  # inside Lightning's fit, between steps or in one: a preemption waits for its end

    def stop(self, signum: int) -> None:
        self.stopping, self.holding = True, False
        raise Stopped(signum)


_signals = _Signals()


def _watch_parent(done: threading.Event) -> None:
    parent = os.getppid()
    while not done.wait(PARENT_POLL_S):
        if os.getppid() != parent:  # re-parented: the sweep that started this worker is gone
            os.kill(os.getpid(), signal.SIGTERM)
            return


@contextlib.contextmanager
def stop_on_signals(watch_parent: bool = False) -> Iterator[None]:
    """Within the block, the first SIGTERM / SIGINT raises `Stopped` in the main thread (later ones are
    ignored while it unwinds and records the run); `watch_parent`: also stop when the parent process
    goes away (a sweep worker). Outside the main thread, where Python allows no handler, nothing changes."""
    global _signals
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _signals = _Signals()  # a sweep worker runs one job after another

    def handler(signum, frame):
        if _signals.stopping or _signals.pending:
            return
        if signum in PREEMPT_SIGNALS and _signals.training:
            _signals.preempt = _signals.preempt or signum  # checkpointed and stopped at the step's end
        elif _signals.holding:
            _signals.pending = signum
        else:
            _signals.stop(signum)

    signums = (*SIGNALS, *PREEMPT_SIGNALS) if under_slurm() else SIGNALS
    previous = {s: signal.signal(s, handler) for s in signums}
    done = threading.Event()
    if watch_parent:
        threading.Thread(target=_watch_parent, args=(done,), name="ablate-parent-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        for signum, old in previous.items():
            signal.signal(signum, old)
        _signals = _Signals()  # a signal still held back belongs to the run that just ended


def under_slurm() -> bool:
    """Whether this process is a SLURM job's (sbatch, srun, a submitit job): its scheduler may warn it."""
    return bool(os.environ.get("SLURM_JOB_ID"))


def slurm_job_id() -> str | None:
    """The id `scontrol requeue` takes for this job: `<array job>_<task>` in a job array, else the job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def preempted(signum: int | None) -> bool:
    """Whether a stop by `signum` is the scheduler's warning (a job to requeue), not a stop asked for."""
    return signum in PREEMPT_SIGNALS and under_slurm()


def requeue_job() -> str:
    """Put this SLURM job back in the queue (`scontrol requeue`, as Lightning's SLURM plugin does): it
    starts again as it was submitted and the run resumes from its checkpoint. One line saying what happened
    (with the fix when SLURM refused: a cluster with JobRequeue=0 wants `sbatch --requeue`)."""
    job = slurm_job_id()
    try:
        done = subprocess.run(["scontrol", "requeue", str(job)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return f"could not requeue SLURM job {job} ({err}): submit it again to resume"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        return (f"SLURM refused to requeue job {job} ({why[0]}): submit with `sbatch --requeue` "
                "(hydra/launcher=slurm does), or submit it again to resume")
    return f"requeued SLURM job {job}: it resumes from its checkpoint when it starts again"


def stop_signal(exc: BaseException) -> int | None:
    """The signal behind a stop on purpose (resumable, not a failure), or None: Stopped, Ctrl-C outside
    `stop_on_signals`, or Lightning's SIGTERMException, which it raises at the end of the step under
    way when it saw the SIGTERM too (a signal held back by `step_boundaries`, data-parallel ranks)."""
    if isinstance(exc, Stopped):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    if type(exc).__name__ == "SIGTERMException":
        return signal.SIGTERM
    return None


def step_boundaries(last_checkpoint: str | None = None):
    """A Lightning callback that holds a stop back from a step's checkpoint until the step's metrics
    row is logged, the one moment a stop would lose a row: Lightning saves the checkpoint of step n in
    `on_train_batch_end`, then logs the row of step n; a resume starts after the checkpoint. Anywhere
    else the run stops where it is (the step under way is redone on resume). A preemption (SLURM's
    warning, `PREEMPT_SIGNALS`) waits for the step's end, saves `last_checkpoint` there (every rank
    decides alike under DDP) and stops after the row. Place it right before the ModelCheckpoint callback
    (Lightning runs checkpoint callbacks last)."""
    from lightning.pytorch.callbacks import Callback  # heavy: lightning (seconds), off the refusal path

    def release(*_args) -> None:
        _signals.holding = False
        if _signals.pending and not _signals.stopping:
            _signals.stop(_signals.pending)

    class StepBoundaries(Callback):
        def on_train_start(self, *_args) -> None:
            _signals.training = True

        def on_train_batch_end(self, trainer, *_args) -> None:
            _signals.holding = True
            preempt = _signals.preempt
            if trainer.world_size > 1 and under_slurm():  # one rank's signal stops every rank at one step
                preempt = trainer.strategy.reduce_boolean_decision(bool(preempt), all=False) and (
                    preempt or signal.SIGUSR1)
            if preempt and last_checkpoint and not _signals.stopping:
                trainer.save_checkpoint(last_checkpoint)  # the state ModelCheckpoint would save here
                log.warning("preempted by %s: checkpointed step %d to %s; stopping after its row",
                            signal.Signals(preempt).name, trainer.global_step, last_checkpoint)
                _signals.training, _signals.pending = False, preempt

        def on_train_batch_start(self, *_args) -> None:
            release()

        def on_train_epoch_end(self, *_args) -> None:  # before Lightning's own SIGTERM check there
            release()

        def on_train_end(self, *_args) -> None:
            _signals.training = False
            _signals.pending = _signals.pending or _signals.preempt  # came after the last step's end
            release()

        def on_exception(self, *_args) -> None:
            _signals.holding = _signals.training = False

    return StepBoundaries()


def exit_now(code: int) -> None:
    """Leave the process at once (a sweep worker whose sweep is stopping: no more jobs, no result to
    hand back), after the exit handlers (which release its named semaphores: the sweep's resource
    tracker would report them leaked) and flushing what it printed and logged."""
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def stop_workers(grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM every child process of this one (a local sweep's workers), wait up to `grace_s` for
    them to exit, SIGKILL the rest; returns how many there were. Exits are watched on each process's
    sentinel, which works whoever reaps it (joblib's own thread may)."""
    workers = multiprocessing.active_children()
    for worker in workers:
        with contextlib.suppress(OSError):
            os.kill(worker.pid, signal.SIGTERM)
    pending = {worker.sentinel: worker for worker in workers}
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        for sentinel in wait(list(pending), deadline - time.monotonic()):
            worker = pending.pop(sentinel)
            with contextlib.suppress(OSError):  # reap it (unless joblib's thread did): no zombie is left
                os.waitpid(worker.pid, 0)
    for worker in pending.values():
        log.warning("sweep worker %d did not stop within %.0f s of SIGTERM; killing it", worker.pid, grace_s)
        with contextlib.suppress(OSError):
            os.kill(worker.pid, signal.SIGKILL)
    return len(workers)


@contextlib.contextmanager
def workers_stop_with_parent(grace_s: float = STOP_GRACE_S) -> Iterator[None]:
    """Within the block (a local sweep's parent waiting on its workers), SIGTERM / SIGINT stop the
    workers (`stop_workers`), then raise `Stopped` here (exit status 128 + the signal's number)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the wait short
        name = signal.Signals(signum).name
        print(f"sweep stopped by {name}: stopping its worker processes (up to {grace_s:.0f} s)", file=sys.stderr,
              flush=True)
        n = stop_workers(grace_s)
        print(f"sweep stopped: {n} worker process(es) ended; a job they were running is marked interrupted in its "
              "status.json, and re-running the same command resumes the sweep", file=sys.stderr, flush=True)
        raise Stopped(signum)  # through joblib, which then cleans up its (now idle) pool and shared memory

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
