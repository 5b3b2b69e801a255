"""One live owner per run directory: `with owned(run_dir):` before anything writes there.

Two launches of one directory (a second terminal, a re-launched sweep while the first still runs)
would write the same checkpoints, metrics and evaluations in turn, and the second would record the
first's live attempt as interrupted. The owner holds an exclusive `flock` on `<run>/run.lock` for as
long as it runs; the kernel drops it when the process ends, however it ends, so a killed owner
leaves no lock behind. The file itself stays (unlinking a lock file lets two processes lock two
inodes); while held it names its holder (host, pid, since) for the refusal message.

A flock only reaches as far as the filesystem shares it (an NFS mount without lock support keeps
locks per host), so status.json is checked as well: a `running` attempt on another host owns the
directory until its heartbeat is older than `ablate.rundir.status.STALE_S` (10 min). On this host the lock
is the whole truth: a `running` status whose process no longer holds the lock was killed.

Taking over such a stale attempt marks it `interrupted` in status.json, with a `takeover` record
(when, by which host and pid, why); the new attempt's `RunStatus.start` moves it into `history`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ablate.rundir import atomic
from ablate.rundir.layout import RunDir, RunDirLike
from ablate.rundir.status import STALE_S, State, interrupted, read_status

log = logging.getLogger("ablate.ownership")

SKIPPED = "skipped: run directory in use"  # a sweep job's return value when another process owns its run
_CONTENTION = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
_held: dict[str, "_Claim"] = {}  # run directories this process owns: a nested `owned` is a no-op


class RunOwned(Exception):
    """Another live process owns the run directory; the message names it and the way out."""


class _Claim:
    def __init__(self, run: RunDir, fd: int | None):
        self.run, self.fd, self.depth = run, fd, 1


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _lock(path: Path) -> tuple[int | None, bool]:
    """(fd, True) holding the flock, or (None, False) where there is no flock (status.json alone
    decides then); BlockingIOError when another process holds it."""
    try:
        import fcntl  # optional: POSIX only
    except ImportError:  # Windows: no flock
        return None, False
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in _CONTENTION:
            raise BlockingIOError(err.errno, "held") from None
        log.warning("%s: no file lock on this filesystem (%s); ownership rests on status.json's pid and heartbeat",
                    path, err)
        return None, False
    return fd, True


def _holder(run: RunDir) -> dict[str, Any]:
    """The lock holder's record, or {} while it is still writing it."""
    try:
        record = json.loads(run.lock_file.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def owner_message(run_dir: Path, owner: dict[str, Any]) -> str:
    """Who owns `run_dir` and what to do: the refusal a second launch prints."""
    host, pid = owner.get("host"), owner.get("pid")
    if pid is None:  # the holder has not written its record yet
        return (f"run directory {run_dir} is in use by another process that has just started; this launch "
                "changed nothing there. Wait for it to finish, or give this run another directory "
                "(hydra.run.dir=... or hydra.sweep.dir=...)")
    since = owner.get("since") or owner.get("started_at")
    sweep = owner.get("sweep_pid")
    who = f"pid {pid} on {host}"
    who += f", a job of sweep {sweep}" if sweep else ""
    who += f", running it since {since}" if since else ""
    beat = owner.get("heartbeat_at")
    if beat and host != socket.gethostname():
        who += f"; last heartbeat {beat}, and its claim lapses {STALE_S / 60:.0f} min after the last one"
    stop = (f"kill {sweep} on {host} stops that sweep: its jobs mark their runs interrupted" if sweep
            else f"kill {pid} on {host}: it marks the run interrupted")
    return (f"run directory {run_dir} is in use by another process ({who}); this launch changed nothing "
            f"there. Wait for it to finish, or stop it ({stop}, and re-running this command then resumes it), "
            "or give this run another directory (hydra.run.dir=... or hydra.sweep.dir=...)")


def _stale_reason(status: dict[str, Any], locked: bool) -> str | None:
    """Why a `running` status.json is no one's any more, or None when its process may be alive."""
    reason = interrupted(status)
    if reason is None and locked and status.get("host") == socket.gethostname():
        # The lock is the truth on this host: a live pid here that does not hold it is another process
        # that reused the number.
        reason = f"interrupted: its process {status.get('pid')} no longer holds {RunDir.LOCK}"
    return reason


def _take_over(run: RunDir, status: dict[str, Any], reason: str) -> None:
    """Mark the stale attempt interrupted, saying who took the directory over and why."""
    log.warning("%s: taking over from a gone process (%s)", run.root, reason)
    status.update(state=State.INTERRUPTED, finished_at=status.get("heartbeat_at") or status.get("started_at"),
                  takeover={"at": _now(), "host": socket.gethostname(), "pid": os.getpid(), "reason": reason})
    atomic.write_json(run.status_file, status)


def claim(run_dir: RunDirLike, sweep_pid: int | None = None) -> _Claim:
    """Own `run_dir` (created if absent) or raise RunOwned naming its owner; a stale owner's attempt
    is taken over. `sweep_pid`: the sweep this job belongs to, which a refusal names as the one to
    stop. Release with `release`."""
    run = RunDir.of(run_dir)
    run.root.mkdir(parents=True, exist_ok=True)
    try:
        fd, locked = _lock(run.lock_file)
    except BlockingIOError:
        status = read_status(run) or {}
        owner = _holder(run)
        if status.get("pid") == owner.get("pid") and status.get("host") == owner.get("host"):
            owner = {**owner, "heartbeat_at": status.get("heartbeat_at")}
        raise RunOwned(owner_message(run.root, owner)) from None
    claimed = _Claim(run, fd)
    try:
        status = read_status(run) or {}
        if status.get("state") == State.RUNNING:
            reason = _stale_reason(status, locked)
            if reason is None:
                raise RunOwned(owner_message(run.root, status))
            _take_over(run, status, reason)
        if fd is not None:
            record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": _now(),
                                 **({"sweep_pid": sweep_pid} if sweep_pid else {})})
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
    except BaseException:
        release(claimed)
        raise
    return claimed


def release(claimed: _Claim) -> None:
    if claimed.fd is None:
        return
    with contextlib.suppress(OSError):
        os.ftruncate(claimed.fd, 0)  # an unheld lock names no one
    os.close(claimed.fd)  # closing drops the flock
    claimed.fd = None


@contextlib.contextmanager
def owned(run_dir: RunDirLike, sweep_pid: int | None = None) -> Iterator[Path]:
    """Own `run_dir` for the block (RunOwned if another live process does; see `claim`); re-entrant
    in one process."""
    root = RunDir.of(run_dir).root
    key = str(root.resolve())
    if key in _held:
        _held[key].depth += 1
    else:
        _held[key] = claim(root, sweep_pid)
    try:
        yield root
    finally:
        held = _held[key]
        held.depth -= 1
        if held.depth == 0:
            del _held[key]
            release(held)
