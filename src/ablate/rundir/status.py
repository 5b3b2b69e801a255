"""The run directory's `status.json`: running -> completed | failed, with timings and versions.

Written atomically (temp file + rename) so a crash never leaves half a file. A run stopped by
SIGTERM / SIGINT records itself `interrupted` (ablate.stopping). One killed outright still reads
`running`; its pid, host and heartbeat tell `ablate.stats` that it was interrupted (`interrupted`),
and the next attempt, once it owns the directory (ablate.rundir.ownership), records it so in `history`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, get_type_hints

from ablate.rundir import atomic
from ablate.rundir.checks import COUNT, NONNEGATIVE, bad_number, finite, show
from ablate.rundir.layout import RunDir, RunDirLike
from ablate.stopping import stop_signal

log = logging.getLogger("ablate.train")


class State(StrEnum):
    """A run's `state`: running -> completed | failed | interrupted (written as its text)."""

    COMPLETED = "completed"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


@dataclass
class Status:
    """status.json's keys, each with its type: what a writer may record (`RunStatus.update` refuses any
    other key) and what a reader checks (`check_status`: text, a whole count >= 0 (int), seconds or another
    number >= 0 (float), a list, an object). A new key is a field here and the line that writes it."""

    # the attempt, kept by RunStatus
    state: State = State.RUNNING
    started_at: str | None = None
    finished_at: str | None = None
    heartbeat_at: str | None = None
    duration_s: float | None = None
    total_duration_s: float | None = None
    attempts: int | None = None
    host: str | None = None
    pid: int | None = None
    error: str | None = None
    git_sha: str | None = None
    versions: dict | None = None
    timings: dict | None = None
    timings_total: dict | None = None
    history: list | None = None  # the earlier attempts, each with _ATTEMPT_KEYS
    history_restarted: str | None = None  # why the attempts before this one are not in `history` (a damaged file)
    resumed_from: dict | None = None  # {"checkpoint": the one resumed from (None: step 0), "passed_over": [...]}
    takeover: dict | None = None  # who found the attempt stale, when and why (ablate.rundir.ownership)
    # what the stage records
    stage: str | None = None
    init: str | None = None  # the starting model's name or path
    init_sha256: str | None = None  # of its weights (a random init has none)
    study_sha256: str | None = None  # the study block's fingerprint
    code: dict | None = None  # the training and analysis code's fingerprints (ablate.rundir.code)
    threads: int | None = None
    world_size: int | None = None  # the data-parallel processes over all nodes (written by ablate.fit)
    effective_batch: int | None = None  # world_size x the stage's per-device batch
    device: str | None = None
    model_dir: str | None = None
    parameters: int | None = None
    train_problems: int | None = None
    test_problems: int | None = None
    pairs: int | None = None
    pair_kinds: dict | None = None
    pair_operands: dict | None = None
    warnings: list | None = None


KEYS = tuple(f.name for f in fields(Status))
_TYPES = {name: hint for name, hint in get_type_hints(Status).items() if name != "state"}

PACKAGES = ("ablate", "torch", "transformers", "lightning", "hydra-core", "datasets", "vllm")
# Recorded under the import name; looked up under the distribution's (the package index's `ablate` is
# another project, whose version must never be recorded as ours).
DISTRIBUTIONS = {"ablate": "ablate-rl"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(DISTRIBUTIONS.get(name, name))
        except metadata.PackageNotFoundError:
            found[name] = None
    try:  # torch picks its CPU kernels by the instruction set, and the last bits follow (AVX2 vs AVX512)
        import torch  # heavy: torch; the stats CLI reads this module

        found["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        found["cpu_capability"] = None
    return found


def read_status(run_dir: RunDirLike) -> dict[str, Any] | None:
    """status.json as an object, or None when it is absent or damaged (not JSON, not an object, bytes that
    are not text): a resume then starts a fresh record rather than a traceback (issue 45)."""
    return _read(RunDir.of(run_dir).status_file)[0]


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """status.json as an object (None when absent or damaged), and why it is damaged (None when it is not)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:  # JSON and Unicode decoding errors are ValueErrors
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    return (data, None) if isinstance(data, dict) else (None, f"a JSON {type(data).__name__}, not an object")


def _history(previous: dict[str, Any]) -> tuple[list[dict], str | None]:
    """The earlier attempts `previous` lists, and why some are lost (None when none is)."""
    old = previous.get("history", [])
    if not isinstance(old, list):
        return [], f"its history is {show(old)}, not a list"
    kept = [dict(h) for h in old if isinstance(h, dict)]
    return kept, (f"{len(old) - len(kept)} of its {len(old)} earlier attempts are not objects"
                  if len(kept) < len(old) else None)


def _attempts(status: dict[str, Any]) -> int:
    count = status.get("attempts", 0)
    return int(count) if isinstance(count, (int, float)) and not isinstance(count, bool) and 0 <= count < 1e9 else 0


# The data-parallel layout a run trained with, written by ablate.fit (`record_data_parallel`) and read by
# ablate.stats, which makes the effective batch part of a run's condition: `world_size` (processes over all
# nodes) and `effective_batch`, the world size x the stage's per-device batch (RLOO's stage.batch_prompts
# prompts, SFT's and DPO's stage.batch_size). A resumed attempt that does not train again keeps them.
WORLD_SIZE, EFFECTIVE_BATCH = "world_size", "effective_batch"
_CARRIED = (WORLD_SIZE, EFFECTIVE_BATCH)


def data_parallel(status: dict[str, Any] | None) -> tuple[int, int] | None:
    """(world size, effective batch) as `status` records them, or None where it records no whole pair
    (a run from before they were recorded, a damaged value)."""
    pair = tuple((status or {}).get(key) for key in (WORLD_SIZE, EFFECTIVE_BATCH))
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        return pair  # type: ignore[return-value]
    return None


HEARTBEAT_S = 30.0  # a running job rewrites heartbeat_at this often
STALE_S = 600.0  # a heartbeat older than this means the job is gone (killed, machine lost)
_ATTEMPT_KEYS = ("state", "started_at", "finished_at", "heartbeat_at", "duration_s", "timings", "error", "host",
                 "pid", "git_sha")
# what an attempt notes only where it happened, kept with it in `history`: who found it stale (ablate.rundir.ownership),
# why the history before it was lost, which checkpoint it resumed from past damaged ones (ablate.run)
_ATTEMPT_NOTES = ("takeover", "history_restarted", "resumed_from")


def interrupted(status: dict[str, Any], now: float | None = None, host: str | None = None) -> str | None:
    """Why a status that says `running` is not running any more, or None when it may be: its process
    is gone (same host, pid not alive), or its heartbeat is older than STALE_S."""
    if status.get("state") != State.RUNNING:
        return None
    host = socket.gethostname() if host is None else host
    pid = status.get("pid")
    if status.get("host") == host and isinstance(pid, int) and not atomic.pid_alive(pid):
        return f"interrupted: its process {pid} on {host} is gone"
    beat = status.get("heartbeat_at")
    if beat:
        try:
            age = (now if now is not None else time.time()) - datetime.fromisoformat(beat).timestamp()
        except (TypeError, ValueError):
            return None
        if age > STALE_S:
            return f"interrupted: no heartbeat for {age / 60:.0f} min (last {beat})"
    return None


class RunStatus:
    """`writer=False` (a data-parallel worker process) keeps the record in memory only: rank 0 owns the file.

    Every attempt is kept: `history` lists the earlier ones (state, start, end, duration, timings,
    error; a killed one as `interrupted`), `timings_total` and `total_duration_s` add them up, and
    the top-level fields describe the current attempt. While running, a background thread rewrites
    `heartbeat_at` every HEARTBEAT_S seconds; with `pid` and `host` that lets `ablate.stats` tell a
    killed job from a running one (`interrupted`)."""

    def __init__(self, run_dir: RunDirLike, writer: bool = True, heartbeat_s: float = HEARTBEAT_S):
        self.run = RunDir.of(run_dir)
        self.path = self.run.status_file
        self.data: dict[str, Any] = {}
        self.writer = writer
        self._start = time.monotonic()
        self._heartbeat_s = heartbeat_s
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        if not self.writer:
            return
        with self._lock:
            atomic.write_json(self.path, self.data)

    def start(self, **extra: Any) -> None:
        """A new attempt. The caller owns the run directory (`ablate.rundir.ownership.owned`), so an earlier
        attempt still marked running is gone: it was killed, and is recorded as interrupted."""
        previous, damaged = _read(self.path)
        previous = previous or {}
        history, lost = _history(previous)
        restarted = f"status.json was damaged ({damaged or lost}): earlier attempts are lost" if damaged or lost else None
        if restarted:  # one line, and kept in the record (`history_restarted`)
            log.warning("%s: %s; a new history starts here", self.path.parent, restarted)
        if previous.get("started_at"):
            last = {key: previous.get(key) for key in _ATTEMPT_KEYS}
            last.update({key: previous[key] for key in _ATTEMPT_NOTES if previous.get(key)})
            if last["state"] == State.RUNNING:  # killed: it never wrote an end
                last["state"] = State.INTERRUPTED
                last["finished_at"] = previous.get("heartbeat_at") or previous.get("started_at")
            history.append(last)
        now = _now()
        _declared(extra)
        self.data = {"state": State.RUNNING, "started_at": now, "finished_at": None, "heartbeat_at": now,
                     "duration_s": None, "attempts": _attempts(previous) + 1, "git_sha": git_sha(),
                     "versions": versions(), "host": socket.gethostname(), "pid": os.getpid(), "error": None,
                     "timings": {}, "history": history, **({"history_restarted": restarted} if restarted else {}),
                     **{key: previous[key] for key in _CARRIED if key in previous}, **extra}
        self._totals()
        self._write()
        if self.writer and self._heartbeat_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name="ablate-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            with self._lock:
                if self.data.get("state") != State.RUNNING:
                    return
                self.data["heartbeat_at"] = _now()
                try:
                    self._write()
                except OSError:
                    pass  # a full disk must not kill the job from this thread

    def _totals(self) -> None:
        totals: dict[str, float] = {}
        duration = 0.0
        for attempt in [*self.data.get("history", []), self.data]:
            for phase, seconds in (attempt.get("timings") or {}).items():
                if isinstance(seconds, (int, float)):
                    totals[phase] = round(totals.get(phase, 0.0) + seconds, 3)
            if isinstance(attempt.get("duration_s"), (int, float)):
                duration += attempt["duration_s"]
        self.data["timings_total"] = totals
        self.data["total_duration_s"] = round(duration, 3)

    def timing(self, phase: str, seconds: float) -> None:
        with self._lock:
            self.data.setdefault("timings", {})[phase] = round(seconds, 3)
            self._totals()
            self._write()

    def update(self, **fields: Any) -> None:
        _declared(fields)
        with self._lock:
            self.data.update(fields)
            self._write()

    def _finish(self, state: State, error: str | None) -> None:
        self._stop.set()
        with self._lock:
            self.data.update(state=state, finished_at=_now(), heartbeat_at=_now(),
                             duration_s=round(time.monotonic() - self._start, 3), error=error)
            self._totals()
            self._write()

    def complete(self) -> None:
        self._finish(State.COMPLETED, None)

    @contextlib.contextmanager
    def running(self, **extra: Any) -> Iterator["RunStatus"]:
        """`with RunStatus(run_dir).running(stage=...) as status:` starts the attempt, completes it when
        the block ends, and records an exception out of the block (then re-raises it): a stop
        (ablate.stopping) as `interrupted`, anything else as the failure."""
        self.start(**extra)
        try:
            yield self
        except BaseException as exc:
            signum = stop_signal(exc)
            if signum:  # stopped on purpose (SIGTERM, Ctrl-C): resumable, not a failure
                self._finish(State.INTERRUPTED, f"stopped by {signal.Signals(signum).name}")
            else:
                self.fail(exc)
            raise
        if self.data.get("state") == State.RUNNING:
            self.complete()

    def fail(self, exc: BaseException) -> None:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
        self._finish(State.FAILED, f"{type(exc).__name__}: {exc}\n{detail}")


def _declared(fields: dict[str, Any]) -> None:
    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise KeyError(f"status.json has no key {', '.join(unknown)}: declare it in ablate.rundir.status.Status")


def _kind(hint: Any) -> type:
    """The one type a key's hint names besides None (`int | None` -> int)."""
    return next(a for a in getattr(hint, "__args__", (hint,)) if a is not type(None))


def check_status(status: Any, issues: list[str]) -> dict | None:
    """status.json as far as a reader can trust it: an object, `state` one of State (text), no NaN or
    infinity, every declared key of its type (a key that is not is named in `issues` and read as absent)."""
    if status is None:
        return None
    if not isinstance(status, dict):
        issues.append(f"status.json: a JSON {type(status).__name__}, not an object; not used (state unknown)")
        return None
    found: list[str] = []
    status = finite(status, "", found)
    if found:
        issues.append(f"status.json: {'; '.join(found[:4])}; read as absent (null)")
    state = status.get("state")
    if not isinstance(state, str) or state not in tuple(State):
        issues.append(f"status.json: state {show(state)} is not one of {', '.join(State)}; the run is not "
                      "counted as completed")
    for key, hint in _TYPES.items():
        if status.get(key) is not None and (why := _bad_value(status[key], _kind(hint))):
            issues.append(f"status.json: {key} is {why}; ignored")
            status = {**status, key: None}
    return status


_NOT = {str: "not text", list: "not a list", dict: "not an object"}


def _bad_value(value: Any, kind: type) -> str | None:
    if kind in (int, float):
        return bad_number(value, COUNT if kind is int else NONNEGATIVE)
    return None if isinstance(value, kind) else f"{show(value)}, {_NOT[kind]}"
