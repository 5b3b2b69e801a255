"""Atomic writes for every file of a run directory that a reader trusts (status.json, summary.json,
samples.jsonl, pairs.jsonl, metrics.csv merges, the model export, Lightning checkpoints).

A file is written to a temporary name in its own directory (so the rename never crosses a
filesystem), flushed and fsync'd, then `os.replace`d onto its name: a reader sees the old file or
the new one, never half of one, and a kill leaves at worst a `*.tmp-<pid>` file next to it, which
`remove_orphans` deletes on the next start. A directory (the model export) is built under a
temporary name and renamed into place the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

TMP_MARK = ".tmp-"


def _tmp_name(path: Path) -> Path:
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_with(path: str | Path, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Call `write(file)` on a temporary file next to `path`, then move it onto `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if err.filename is None:  # a failed write names no file: name the one being written (disk full)
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)
    return path


def write_text(path: str | Path, text: str) -> Path:
    return write_with(path, lambda f: f.write(text))


def write_bytes(path: str | Path, data: bytes) -> Path:
    return write_with(path, lambda f: f.write(data), mode="wb")


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


def write_lines(path: str | Path, lines: Iterable[str]) -> Path:
    """One line per item (a newline is added to each)."""
    def write(f):
        for line in lines:
            f.write(line + "\n")
    return write_with(path, write)


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> Path:
    return write_lines(path, (json.dumps(row) for row in rows))


@contextlib.contextmanager
def directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory next to `path` to fill; on success it replaces `path` (an old
    `path` is moved aside and deleted), so `path` exists only complete. On error it is deleted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                with open(child, "rb") as f:
                    os.fsync(f.fileno())
        old = path.with_name(f"{path.name}{TMP_MARK}old-{os.getpid()}")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_orphans(folder: str | Path) -> list[Path]:
    """Delete what killed writers left in `folder` (not recursive): `*.tmp-<pid>` files and
    directories whose process is gone."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for child in folder.iterdir():
        name, mark, owner = child.name.rpartition(TMP_MARK)
        if not mark or not name:
            continue
        pid = owner.removeprefix("old-")
        if pid.isdigit() and pid_alive(int(pid)) and int(pid) != os.getpid():
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()
        removed.append(child)
    return removed


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


# Weight files `save_pretrained` writes (one of them, or an index of shards).
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def model_exported(model_dir: str | Path) -> bool:
    """A complete `save_pretrained` export: config.json and weights. `export_model` only ever
    shows a complete one; this also tells a half-written export of older versions from a good one."""
    model_dir = Path(model_dir)
    return (model_dir / "config.json").is_file() and any((model_dir / name).is_file() for name in WEIGHT_FILES)


def export_model(model, tokenizer, model_dir: str | Path) -> Path:
    """`save_pretrained` of the model and tokenizer into `model_dir`, atomically (all or nothing)."""
    with directory(model_dir) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return Path(model_dir)


def checkpoint_io():
    """A Lightning CheckpointIO whose saves are atomic inside the checkpoint's own directory (Lightning's
    own writes a temporary file under $TMPDIR and moves it: not atomic across filesystems, and a kill
    leaves the temporary file there)."""
    # heavy: torch and lightning; the stats CLI and the config checks read this module
    import torch
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    class AtomicCheckpointIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
            if storage_options is not None:
                raise TypeError("AtomicCheckpointIO takes no storage_options")
            remove_orphans(Path(path).parent)
            write_with(path, lambda f: torch.save(checkpoint, f), mode="wb")

    return AtomicCheckpointIO()
