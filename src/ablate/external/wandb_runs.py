"""Weights & Biases runs as rows of the tidy table: a run directory's transaction log, or W&B's CSV exports.

**Run directories** (`wandb/offline-run-<time>-<id>/`, and the `run-<time>-<id>/` of an online run). wandb
0.31 writes a run's data only into its binary transaction log `run-<id>.wandb` (an offline run's `files/`
holds just requirements.txt: no config.yaml, no wandb-summary.json). It is read with wandb's own reader,
`wandb leet inspect --json` (wandb >= 0.31; wandb/core/internal/leet, DumpRecords/writeRecordJSON): one
JSON object a record, each logged item list turned into `{dotted key: value}`, NaN and infinities as the
strings "NaN", "Infinity", "-Infinity"; its notes (corrupt data skipped, an incomplete file) go to stderr.
Of the records: `run` (config, display name, start time), `config` (later config updates), `history` (one
row per logged step: `step.num`, `item`), `summary` (updates of the final values) and `exit` (the exit
code). A run's rows are its history by step, plus the summary's numbers that no history row logged (set
with `run.summary[...]`) on its last step. Keys starting with `_` (_step, _runtime, ...) are wandb's own.
A run without an exit record (still running, or killed before `wandb.finish`) or with a non-zero exit code
is named and left out, as W&B's export marks it not `finished`.

**CSV exports** of the W&B web app (every cell quoted). The runs table's: a row per run, the columns `Name`,
`State`, `Notes` (`-` when empty), `User`, `Tags`, `Created` (`2025-12-13T23:28:41.000Z`), `Runtime`
(seconds), `Sweep`, then one column per config key (`seed`, `lr`, ...) and one per summary metric. A line
plot's: the x axis first (`Step`, or the metric chosen as x, e.g. `epoch`), then `<run name> - <metric>`
columns, each with `__MIN` and `__MAX` companions (dropped here). Columns starting with `_` are wandb's own
(`_step`, `_runtime`, ...) and dropped; `Name` becomes `run`, `Created` `started_at`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

LOG_GLOB = "run-*.wandb"
FINISHED = {"finished"}
NON_FINITE = {"NaN", "Infinity", "-Infinity"}
QUIET = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false"}  # no network at all
TIMEOUT_S = 600


@dataclass
class WandbRun:
    """What a run's transaction log holds, as ablate reads it."""

    name: str  # the run's display name
    config: dict  # flattened: nested keys joined by `.`
    exit_code: int | None  # None: no exit record
    started_at: str | None
    frame: pd.DataFrame | None  # step + one column per metric; None: no numbers logged


def _flat(mapping: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _records(path: Path, problems: list[str], where: str) -> list[dict] | None:
    """The run's records, by wandb's own reader (module docstring); None when it could not read them. The
    wandb-core command line is the one `wandb leet inspect --json FILE` runs (wandb/cli/leet.py: _base_args,
    _get_local_launch_args), called directly: the CLI's Python start-up costs about a second a run."""
    if importlib.util.find_spec("wandb") is None:
        problems.append(f"{where}: reading {path.name} needs the `wandb` package (pip install 'wandb>=0.31'); not read")
        return None
    try:
        from wandb.util import get_core_path  # optional: wandb

        command = [get_core_path(), "leet", "inspect", "--no-observability", "--json", "--run-file",
                   str(path.resolve()), str(path.resolve().parent.parent)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, **QUIET})
    except Exception as exc:  # noqa: BLE001 - no wandb-core for this platform, OSError, a timeout
        problems.append(f"{where}: wandb could not read {path.name} ({' '.join(str(exc).split())[:160]}); not read")
        return None
    notes = [line.removeprefix("wandb leet inspect:").strip() for line in done.stderr.splitlines() if line.strip()]
    if done.returncode != 0:
        why = notes[-1] if notes else f"exit code {done.returncode}"
        problems.append(f"{where}: `wandb leet inspect` could not read {path.name} ({why[:160]}; it needs "
                        f"wandb >= 0.31); not read")
        return None
    problems += [f"{where}: {path.name}: wandb says: {note[:200]}" for note in notes
                 if note.startswith(("skipped", "reached"))]
    records = []
    for n, line in enumerate(done.stdout.splitlines(), 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            problems.append(f"{where}: wandb's record {n} of {path.name} is not JSON; not used")
    return records


def inspect_run(path: Path, problems: list[str], where: str) -> WandbRun | None:
    """One run's transaction log read into a WandbRun (module docstring), or None when nothing could be read."""
    records = _records(path, problems, where)
    if records is None:
        return None
    config, summary, rows, bad = {}, {}, [], {}
    name, exit_code, started = "", None, None
    for rec in records:
        kind, body = rec.get("type"), rec.get(rec.get("type"), {})
        if not isinstance(body, dict):
            continue
        if kind == "run":
            name, started = str(body.get("display_name", "")), body.get("start_time")
            config.update(_flat((body.get("config") or {}).get("update") or {}))
        elif kind == "config":
            config.update(_flat(body.get("update") or {}))
        elif kind == "summary":
            summary.update(body.get("update") or {})
            for item in body.get("remove") or []:  # {key} or {nested_key: [...]}: no value to decode
                if isinstance(item, dict):
                    summary.pop(item.get("key") or ".".join(map(str, item.get("nested_key") or [])), None)
        elif kind == "history":
            item = body.get("item") or {}
            step = (body.get("step") or {}).get("num", item.get("_step"))
            if isinstance(step, int):
                rows.append({"step": step, **_metrics(item, bad)})
        elif kind == "exit":
            exit_code = body.get("exit_code")
    for key, count in sorted(bad.items()):
        problems.append(f"{where}: {key} logged {count} non-finite value(s) (NaN or infinite); not used")
    logged = set().union(*rows)
    final = {k: v for k, v in _metrics(summary, {}).items() if k not in logged}
    if final:
        rows.append({"step": max((r["step"] for r in rows), default=0), **final})
    frame = pd.DataFrame(rows).groupby("step", sort=True).last().reset_index() if rows else None
    if frame is not None and started:
        frame["started_at"] = str(started)
    config.pop("_wandb", None)
    return WandbRun(name, config, exit_code, started, frame)


def _metrics(item: dict, bad: dict) -> dict[str, float]:
    """A logged item's finite numbers (keys starting with `_` are wandb's own); non-finite ones counted in `bad`."""
    out = {}
    for key, value in item.items():
        if key.startswith("_") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
        elif (isinstance(value, str) and value in NON_FINITE) or isinstance(value, float):
            bad[key] = bad.get(key, 0) + 1
    return out


def finished(run: WandbRun, problems: list[str], where: str) -> bool:
    if run.exit_code == 0:
        return True
    why = ("has no exit record (still running, or killed before wandb.finish)" if run.exit_code is None
           else f"exited with code {run.exit_code}")
    problems.append(f"{where}: the run {why}; left out of the table")
    return False


def read_wandb(files: list[Path], problems: list[str], where: str) -> pd.DataFrame | None:
    """ablate.external.readers' reader of a run directory found by --pattern or --map: its finished logs' rows."""
    frames = []
    for path in sorted(files):
        run = inspect_run(path, problems, where)
        if run is not None and finished(run, problems, where):
            if run.frame is None:
                problems.append(f"{where}: {path.name} logged no numbers; nothing read")
            else:
                frames.append(run.frame)
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True).groupby("step", sort=True).last().reset_index()  # resumed runs


def runs_by_config(roots: list[Path], conditions: list[str], problems: list[str]) -> pd.DataFrame:
    """The tidy table of every finished run below `roots`, each named by its own config: `seed` and the
    `conditions` keys (nested config keys joined by `.`, e.g. `optimizer.lr`)."""
    parts = []
    for root in roots:
        logs = [root] if root.is_file() else sorted(p for p in root.rglob(LOG_GLOB) if p.is_file())
        if not logs:
            problems.append(f"{root}: holds no wandb run log ({LOG_GLOB}); nothing read")
        for path in logs:
            where = path.parent.name
            run = inspect_run(path, problems, where)
            if run is None or not finished(run, problems, where):
                continue
            lacking = [k for k in ["seed", *conditions] if run.config.get(k) is None]
            if lacking:
                problems.append(f"{where} ({run.name}): its config has no {', '.join(lacking)} (config keys: "
                                f"{', '.join(sorted(run.config)) or 'none'}); left out of the table")
            elif run.frame is None:
                problems.append(f"{where} ({run.name}): logged no numbers; left out of the table")
            else:
                frame = run.frame
                for key in reversed([*conditions, "seed"]):
                    frame.insert(0, key, str(run.config[key]))
                frame.insert(0, "run", where)
                parts.append(frame)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def wandb_csv(path: Path, pattern: re.Pattern | None, problems: list[str]) -> pd.DataFrame:
    """A W&B CSV export (module docstring): the runs table, rows not `finished` named and left out, or a line
    plot's, its __MIN/__MAX companions dropped (needs `pattern` to name each run's condition and seed)."""
    table = pd.read_csv(path)
    table = table.drop(columns=[c for c in table.columns if str(c).startswith("_")])
    if len(table.columns) > 1 and any(" - " in str(c) for c in table.columns[1:]):
        return _wandb_history(table, pattern, path, problems)
    if "State" in table.columns:
        bad = table["State"].astype(str).str.lower().map(lambda s: s not in FINISHED)
        for i in table.index[bad]:
            problems.append(f"{path.name} line {i + 2} ({table.at[i, 'Name'] if 'Name' in table else i}): state "
                            f"{table.at[i, 'State']!r}, not finished; left out of the table")
        table = table[~bad]
    if "Created" in table.columns:
        table = table.rename(columns={"Created": "started_at"})
    if pattern is not None and "Name" in table.columns:
        table = _fields_from_names(table, "Name", pattern, path, problems)
    table = table.rename(columns={"Name": "run"})
    return table.drop(columns=[c for c in ("State", "Notes", "User", "Tags", "Sweep") if c in table.columns])


def _fields_from_names(table: pd.DataFrame, column: str, pattern: re.Pattern, path: Path, problems) -> pd.DataFrame:
    rows = []
    for i, name in table[column].astype(str).items():
        m = pattern.fullmatch(name)
        if m is None:
            problems.append(f"{path.name}: run {name!r} does not match the pattern {pattern.pattern!r}; left out")
            continue
        rows.append({**table.loc[i].to_dict(), **{k.replace("__", "."): v for k, v in m.groupdict().items()}})
    return pd.DataFrame(rows).rename(columns={column: "run"})


def _wandb_history(table: pd.DataFrame, pattern, path: Path, problems) -> pd.DataFrame:
    if pattern is None:
        raise SystemExit(f"error: {path} is a W&B line-plot export: give --pattern to read each run's condition "
                         "and seed from its name")
    x = table.columns[0]  # the panel's x axis: Step, or the metric it plots against
    cols = [c for c in table.columns[1:] if " - " in c and not c.endswith(("__MIN", "__MAX"))]
    long = table.melt(id_vars=[x], value_vars=cols, var_name="key", value_name="value").dropna(subset=["value"])
    long[["Name", "metric"]] = long["key"].str.rsplit(" - ", n=1, expand=True)
    long = long[~long["metric"].str.startswith("_")]
    wide = long.pivot_table(index=["Name", x], columns="metric", values="value", aggfunc="last").reset_index()
    wide.columns.name = None
    return _fields_from_names(wide.rename(columns={x: "step"}), "Name", pattern, path, problems)
