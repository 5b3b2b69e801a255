"""The run directory's `status.json`: running -> completed | failed, with timings and versions.

Written atomically (temp file + rename) so a crash never leaves half a file; a run that died
without reaching `fail` still reads `running`, which `ablate.stats` reports as incomplete.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
import traceback
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("ablate", "torch", "transformers", "lightning", "hydra-core", "datasets", "vllm")


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
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def stash_metrics(run_dir: str | Path) -> None:
    """Move `metrics.csv` aside before a resumed fit: Lightning's CSVLogger deletes an existing
    file when it starts. `merge_metrics` puts the rows back."""
    run_dir = Path(run_dir)
    current, stash = run_dir / "metrics.csv", run_dir / "metrics.resume.csv"
    if not current.is_file():
        return
    import pandas as pd

    frames = [pd.read_csv(p) for p in (stash, current) if p.is_file() and p.stat().st_size]
    if frames:
        merged = pd.concat(frames, ignore_index=True).drop_duplicates(subset=["step"], keep="last")
        merged.to_csv(stash, index=False)
    current.unlink()


def merge_metrics(run_dir: str | Path) -> None:
    """Rows logged before a resume (steps the resumed fit did not log again) + the new rows."""
    run_dir = Path(run_dir)
    current, stash = run_dir / "metrics.csv", run_dir / "metrics.resume.csv"
    if not stash.is_file():
        return
    import pandas as pd

    old = pd.read_csv(stash)
    if current.is_file() and current.stat().st_size:
        new = pd.read_csv(current)
        old = old[old["step"] < new["step"].min()] if len(new) else old
        old = pd.concat([old, new], ignore_index=True)
    old.sort_values("step").to_csv(current, index=False)
    stash.unlink()


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "status.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


class RunStatus:
    """`writer=False` (a data-parallel worker process) keeps the record in memory only: rank 0 owns the file."""

    def __init__(self, run_dir: str | Path, writer: bool = True):
        self.path = Path(run_dir) / "status.json"
        self.data: dict[str, Any] = {}
        self.writer = writer
        self._start = time.monotonic()

    def _write(self) -> None:
        if not self.writer:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(tmp, self.path)

    def start(self, **extra: Any) -> None:
        previous = read_status(self.path.parent) or {}
        self.data = {"state": "running", "started_at": _now(), "finished_at": None, "duration_s": None,
                     "attempts": int(previous.get("attempts", 0)) + 1, "git_sha": git_sha(), "versions": versions(),
                     "host": socket.gethostname(), "error": None, "timings": {}, **extra}
        self._write()

    def timing(self, phase: str, seconds: float) -> None:
        self.data.setdefault("timings", {})[phase] = round(seconds, 3)
        self._write()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self._write()

    def _finish(self, state: str, error: str | None) -> None:
        self.data.update(state=state, finished_at=_now(), duration_s=round(time.monotonic() - self._start, 3),
                         error=error)
        self._write()

    def complete(self) -> None:
        self._finish("completed", None)

    def fail(self, exc: BaseException) -> None:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
        self._finish("failed", f"{type(exc).__name__}: {exc}\n{detail}")
