"""`ConfigError`, and the checks of a composed run config that read the outside world or the command
line: the seed's type, a data file, a model path, pass@k against n, keys added with `+`. Each of those
returns an error message naming the key and the fix, or None; `ablate.checks.check_config` (and the
entry point, for the overrides) turns it into a config error (exit code 2) before any data generation
or model load. The range checks of each part live with the part (its `check_*` function)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and the fix."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)

# Keys the code reads with a default (`cfg.get(key, default)`) although no shipped yaml sets them
# everywhere: adding one with `+` is meaningful, so it is not an unknown key.
OPTIONAL_KEYS = {
    "tool.anneal_ratio", "tool.stages", "tool.max_messages", "tool.mistake_rate", "eval.save_completions",
    "curriculum.embedding", "curriculum.calibrate", "curriculum.start_level", "curriculum.success_reward",
    "curriculum.difficulty.bins", "curriculum.difficulty.field", "task.drop_unsolvable", "task.hub.name",
    "task.hub.split", "stage.reference_dtype",
}


# Free-form mappings passed on as keyword arguments: any key added there is read.
OPEN_PREFIXES = ("model.arch.", "rollout.engine_kwargs.")


def integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("+-").isdigit()


def seed_error(cfg: Mapping[str, Any]) -> str | None:
    for key, value in (("seed", cfg.get("seed")), ("upstream.seed", (cfg.get("upstream") or {}).get("seed"))):
        if value is not None and not integer(value):
            return f"{key}={value!r}: a seed is an integer, e.g. {key}=0"
    return None


def eval_ks_error(eval_cfg: Mapping[str, Any]) -> str | None:
    n = int(eval_cfg["n"])
    ks = [int(k) for k in eval_cfg["ks"]]
    over = [k for k in ks if k > n]
    if over:
        keep = [k for k in ks if k <= n]
        return (f"eval.ks={ks} asks for pass@{over[0]} but eval.n={n} samples per prompt give pass@k only for k <= n: "
                f"set eval.ks={keep or [1]} or eval.n={max(over)}")
    return None


def task_file_error(task: Mapping[str, Any]) -> str | None:
    """task.source=file: the file exists, has a known suffix and every row parses with its columns."""
    if task.get("source") != "file":
        return None
    f = task.get("file") or {}
    path = f.get("path")
    if not path:
        return "task.source=file needs task.file.path=<a .jsonl, .json or .parquet file of problems>"
    path = Path(str(path)).expanduser()
    if not path.is_file():
        return f"task.file.path={str(path)!r}: no such file (task.source=file reads one problem per row)"
    numbers, target = str(f.get("numbers_column", "nums")), str(f.get("target_column", "target"))
    columns = f"columns {numbers!r} and {target!r} (task.file.numbers_column / task.file.target_column)"
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            names = set(pq.read_schema(path).names)
        except Exception as err:  # pyarrow raises several types for a bad file
            return f"task.file.path={str(path)!r}: not a readable parquet file ({type(err).__name__}: {err})"
        missing = {numbers, target} - names
        return f"task.file.path={str(path)!r}: no column(s) {sorted(missing)}; expected {columns}" if missing else None
    if path.suffix not in (".jsonl", ".json"):
        return f"task.file.path={str(path)!r}: should end in .jsonl, .json or .parquet"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return f"task.file.path={str(path)!r}: unreadable ({err})"
    rows: list[Any] = []
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            return f"task.file.path={str(path)!r}: not valid JSON ({err})"
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                return (f"task.file.path={str(path)!r}: line {lineno} is not valid JSON ({err.msg}); "
                        f"expected one object per line with {columns}")
    if not rows:
        return f"task.file.path={str(path)!r}: no problems in the file"
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or numbers not in row or target not in row:
            return f"task.file.path={str(path)!r}: row {i} lacks {columns}"
    return None


def _looks_local(name: str) -> bool:
    return (name.startswith(("/", "./", "../", "~")) or os.sep + os.sep in name or name.count("/") > 1
            or name.endswith("/") or (os.altsep is not None and os.altsep in name))


def model_source_error(name_or_path: Any, key: str = "model.name_or_path") -> str | None:
    """A shipped checkpoint, an existing local model directory, or a Hub id that exists (in the local
    cache, or on the Hub when it answers within a few seconds; offline, an unknown id is refused)."""
    if not name_or_path:
        return None
    name = str(name_or_path)
    if name.startswith("builtin:"):
        from ablate.models import resolve_path

        try:
            resolve_path(name)
        except ValueError as err:
            return str(err)
        return None
    local = Path(name).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            return None
        return (f"{key}={name!r}: not a model directory (no config.json); point it at a save_pretrained "
                "directory (a run's model/), a Hub id or builtin:tiny-sft")
    if _looks_local(name):
        return f"{key}={name!r}: no such directory; point it at a save_pretrained directory, a Hub id or builtin:tiny-sft"
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        validate_repo_id(name)
    except HFValidationError:
        return f"{key}={name!r}: neither a local directory nor a valid Hub id (like Qwen/Qwen2.5-0.5B-Instruct)"
    except ImportError:  # pragma: no cover
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - an odd cache is not the user's error
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return f"{key}={name!r}: not a local directory and not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

        HfApi().model_info(name, timeout=10)
    except GatedRepoError:
        return None  # it exists; the download will ask for the token
    except RepositoryNotFoundError:
        return f"{key}={name!r}: no such model on the Hugging Face Hub and no such local directory"
    except Exception:  # noqa: BLE001 - no network: let the load say what happened
        return None
    return None


def _flat_keys(cfg: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        keys.add(path)
        if isinstance(value, Mapping):
            keys |= _flat_keys(value, path + ".")
    return keys


def added_keys_error(overrides: Iterable[str], conf_dir: Path) -> str | None:
    """Keys that `+key=value` adds to the config (Hydra refuses `+` on a key that exists): the code
    reads none of them unless they are OPTIONAL_KEYS, so such a run would silently ignore a typo
    (`+stage.lrr=1e-3`). Appending a config group (`+experiment=x`, `+group/sub=x`) is fine, and
    `++key=value` (force) is taken at its word."""
    unknown = []
    for item in overrides:
        text = str(item).strip()
        if not text.startswith("+") or text.startswith("++"):
            continue
        key = text.lstrip("+").partition("=")[0].strip()
        if not key or "/" in key or "@" in key or key.startswith("hydra") or (conf_dir / key.replace(".", "/")).is_dir():
            continue
        if key in OPTIONAL_KEYS or key.startswith(OPEN_PREFIXES):
            continue
        unknown.append(key)
    if not unknown:
        return None
    return (f"unknown key(s) {unknown} added with '+': nothing reads them, so the run would ignore them. "
            "Check the spelling against `python -m ablate.train --cfg job` and set the existing key without '+' "
            "(e.g. stage.lr=1e-3)")
