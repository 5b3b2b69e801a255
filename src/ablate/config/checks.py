"""The checks of a composed run config that read only the config or the outside world: keys nothing
reads (against the schemas), the seed's type, pass@k against n, a data file. Each returns an error
message naming the key and the fix, or None; `ablate.checks.check_config` (and the entry point, for
the overrides) turns it into a config error (exit code 2) before any data generation or model load.
The range checks of each part live with the part (its `check_*` function)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from ablate.config.schemas import SCHEMAS

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
            import pyarrow.parquet as pq  # heavy: ~10 ms of ablate.train's start-up, for a .parquet file only

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


def schema_keys(group: str) -> set[str]:
    """Every key path under `group` that one of its schemas (stored by the parts: ablate.config.schemas) has, e.g.
    `tool.anneal_ratio`, `curriculum.difficulty.bins`: what a `+` override there may name."""
    def fields(schema: type, prefix: str) -> set[str]:
        out = set()
        for f in dataclasses.fields(schema):
            out.add(prefix + f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                out |= fields(type(default), f"{prefix}{f.name}.")
        return out

    return set().union(*(fields(schema, f"{group}.") for g, _, schema in SCHEMAS if g == group))


def added_keys_error(overrides: Iterable[str], conf_dir: Path) -> str | None:
    """Keys that `+key=value` adds to the config (Hydra refuses `+` on a key that exists and accepts any
    other): in a group with schemas, only a key one of them has (`+tool.anneal_ratio=0.5`;
    `unknown_keys_error` then checks it against the option chosen); elsewhere none, since nothing would
    read it and the run would silently ignore a typo (`+stage.lrr=1e-3`). Appending a config group
    (`+experiment=x`, `+group/sub=x`) is fine, and `++key=value` (force) is left to `unknown_keys_error`."""
    typed_groups = {group for group, _, _ in SCHEMAS}
    unknown = []
    for item in overrides:
        text = str(item).strip()
        if not text.startswith("+") or text.startswith("++"):
            continue
        key = text.lstrip("+").partition("=")[0].strip()
        if not key or "/" in key or "@" in key or key.startswith("hydra") or (conf_dir / key.replace(".", "/")).is_dir():
            continue
        group = key.partition(".")[0]
        if key.startswith(OPEN_PREFIXES) or (group in typed_groups and key in schema_keys(group)):
            continue
        unknown.append(key)
    if not unknown:
        return None
    return (f"unknown key(s) {unknown} added with '+': nothing reads them, so the run would ignore them. "
            "Check the spelling against `python -m ablate.train --cfg job` and set the existing key without '+' "
            "(e.g. stage.lr=1e-3)")


def unknown_keys_error(cfg: DictConfig, prefix: str = "") -> str | None:
    """A key of a composed config node typed by a schema that the schema lacks (added with `+` or `++`
    to the option chosen: `stage=rloo +stage.beta=1`): nothing would read it."""
    schema = OmegaConf.get_type(cfg)
    known = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key, value in cfg.items_ex(resolve=False):
        path = f"{prefix}{key}"
        if known is not None and key not in known:
            group = path.partition(".")[0]
            elsewhere = " (another option of the group has it: choose that one)" if path in schema_keys(group) else ""
            return (f"{path}: the schema of this option ({schema.__name__}, {schema.__module__}) has no such "
                    f"key, so nothing would read it{elsewhere}. `python -m ablate.train --cfg job` lists the keys")
        if isinstance(value, DictConfig):
            error = unknown_keys_error(value, path + ".")
            if error:
                return error
    return None
