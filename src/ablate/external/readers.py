"""What trainers write, read into rows of a tidy table (`step` plus one column per metric), one reader per
format. Each takes one run's files and a list it appends one line per problem to, and returns the run's
rows (None when nothing could be read). No reader raises on a damaged file: it names it and goes on.

- tensorboard: event files (`events.out.tfevents.*`: TRL's and verl's `tensorboard` logger, Lightning's,
  any torch.utils.tensorboard.SummaryWriter) — every scalar, by its tag, at its step; `started_at` is the
  first event's wall time.
- trl: a Hugging Face / TRL `trainer_state.json` — its `log_history`, one entry per logging step.
- verl: what verl's trainer logs (verl/utils/tracking.py, Tracking) with `trainer.logger` `console` or `file`.
  console: its LocalLogger prints `concat_dict_to_str` (verl/utils/logger/aggregate_logger.py) to stdout,
  `step:3 - actor/entropy:0.512 - ...` behind Ray's `(TaskRunner pid=..)` prefix; the value is
  `pprint.pformat(v)` (numpy scalars as `np.float64(0.5)`; verl before 2025 wrote `{v:.3f}`); other lines of
  the log are ignored. file: its FileLogger writes `{"step": 3, "data": {...}}` a line (orjson: NaN as null)
  to $VERL_FILE_LOGGER_PATH or `<VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl`; a JSON-lines file of
  another shape (the rollout dumps of `trainer.rollout_data_dir`) is named and skipped.
- summary: a JSON object of one run's final numbers (nested keys joined by `/`), one row at step 0.
- wandb: a W&B run's transaction log `run-<id>.wandb`, read by wandb's own reader (ablate.external.wandb_runs).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ablate.external.wandb_runs import LOG_GLOB, read_wandb
from ablate.stats.read.samples import short

MAX_FILE = 512 << 20  # a log far larger than this is damage, not a log


def _numbers(entry: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) mapping, keys joined by `/` (bools and text are not metrics)."""
    out: dict[str, float] = {}
    for key, value in entry.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_numbers(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def _frame(rows: list[dict]) -> pd.DataFrame | None:
    """Rows (each with `step`) merged per step, later values winning; None when there are none."""
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    return frame.groupby("step", sort=True).last().reset_index()


def read_tensorboard(files: list[Path], problems: list[str], where: str) -> pd.DataFrame | None:
    try:
        # optional: the tensorboard extra
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        problems.append(f"{where}: reading TensorBoard event files needs the `tensorboard` package "
                        f"(pip install ablate-rl[tensorboard]); not read")
        return None
    rows, first = [], None
    for path in sorted(files):
        found = 0
        try:
            for event in EventFileLoader(str(path)).Load():
                for value in event.summary.value:
                    kind = value.WhichOneof("value")
                    if kind == "simple_value":
                        number = float(value.simple_value)
                    elif kind == "tensor" and not value.tensor.tensor_shape.dim:
                        number = float(tensor_util.make_ndarray(value.tensor))
                    else:
                        continue
                    if math.isfinite(number):
                        rows.append({"step": int(event.step), value.tag: number})
                        found += 1
                    first = event.wall_time if first is None else min(first, event.wall_time)
        except Exception as exc:  # noqa: BLE001 - a damaged record raises DataLossError, decode errors, ...
            problems.append(f"{where}: event file {path.name} unreadable after {found} scalar(s) ({short(exc)}); "
                            f"its remaining records not used")
            continue
        damage = _framing(path)
        if damage:
            problems.append(f"{where}: event file {path.name} {damage}; its {found} readable scalar(s) used, the "
                            "rest is lost")
        elif not found:
            problems.append(f"{where}: event file {path.name} holds no scalars; nothing read from it")
    frame = _frame(rows)
    if frame is not None and first is not None:
        frame["started_at"] = datetime.fromtimestamp(first, timezone.utc).isoformat(timespec="seconds")
    return frame


def _framing(path: Path) -> str | None:
    """What is wrong with an event file's record framing (TFRecord: 8-byte length, 4-byte CRC, the data, 4-byte
    CRC), or None: TensorBoard's loader stops quietly at a damaged or cut-off record, so it is checked here."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"unreadable ({short(exc)})"
    pos, records = 0, 0
    while pos < len(data):
        if pos + 12 > len(data):
            return f"is cut off after {records} record(s)"
        length = int.from_bytes(data[pos:pos + 8], "little")
        if pos + 12 + length + 4 > len(data):
            return f"is damaged or cut off after {records} record(s) (a record's length runs past the end)"
        pos += 12 + length + 4
        records += 1
    return None


def _json(path: Path, problems: list[str], where: str):
    try:
        if path.stat().st_size > MAX_FILE:
            problems.append(f"{where}: {path.name} is {path.stat().st_size >> 20} MB, far larger than a log; not read")
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{where}: {path.name} unreadable ({short(exc)}); not used")
        return None


def read_trainer_state(files: list[Path], problems: list[str], where: str) -> pd.DataFrame | None:
    """The `log_history` of the run's trainer_state.json with the most steps (a run's output directory and
    its checkpoint-N/ copies hold the same history, the latest the longest)."""
    best = None
    for path in files:
        state = _json(path, problems, where)
        if state is None:
            continue
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            problems.append(f"{where}: {path.name} has no `log_history` list; not a trainer_state.json")
            continue
        if best is None or len(history) > len(best):
            best = history
    if best is None:
        return None
    rows = []
    for i, entry in enumerate(best):
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            problems.append(f"{where}: trainer_state.json log_history[{i}] has no whole `step`; not used")
            continue
        rows.append({**_numbers({k: v for k, v in entry.items() if k != "step"}), "step": entry["step"]})
    return _frame(rows)


_VERL_LINE = re.compile(r"step:(\d+)\s+-\s+(.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMPY_REPR = re.compile(r"^np\.\w+\((.*)\)$")  # pprint.pformat(np.float64(0.5)) under numpy >= 2


def read_verl(files: list[Path], problems: list[str], where: str) -> pd.DataFrame | None:
    rows: list[dict] = []
    for path in sorted(files):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            problems.append(f"{where}: {path.name} unreadable ({short(exc)}); not used")
            continue
        found = (_verl_jsonl(text, path.name, problems, where) if path.suffix == ".jsonl" or _is_file_logger(text)
                 else _verl_console(text, path.name, problems, where))
        if found is None:
            continue
        rows += found
        if not found:
            problems.append(f"{where}: {path.name} has no verl metric line (step:N - key:value ..., or "
                            '{"step": N, "data": {...}}); nothing read')
    bad: dict[str, int] = {}
    for row in rows:
        for key in [k for k, v in row.items() if not math.isfinite(v)]:
            bad[key] = bad.get(key, 0) + 1
            del row[key]
    for key, count in sorted(bad.items()):
        problems.append(f"{where}: {key} logged {count} non-finite value(s) (NaN or infinite); not used")
    return _frame(rows)


def _is_file_logger(text: str) -> bool:
    """Whether the file's first line is the FileLogger's (at $VERL_FILE_LOGGER_PATH it may have any name)."""
    first = text.lstrip().partition("\n")[0]
    try:
        entry = json.loads(first)
    except ValueError:
        return False
    return isinstance(entry, dict) and "step" in entry and "data" in entry


def _verl_console(text: str, name: str, problems: list[str], where: str) -> list[dict]:
    """The metric lines of a console log (verl prints every numbers.Number: a bool is no metric, and is skipped)."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _VERL_LINE.search(_ANSI.sub("", line).strip())
        if m is None:
            continue
        row = {"step": int(m.group(1))}
        for item in m.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            value = _NUMPY_REPR.sub(r"\1", value.strip())
            try:
                row[key.strip()] = float(value)
            except ValueError:
                if value not in ("True", "False"):  # a bool is a numbers.Number; numpy's np.True_ is not
                    problems.append(f"{where}: {name} line {n}: {item.strip()!r} is not key:number; not used")
        rows.append(row)
    return rows


def _verl_jsonl(text: str, name: str, problems: list[str], where: str) -> list[dict] | None:
    """The lines of verl's FileLogger; None (and one problem line) when the file is JSON lines of another shape."""
    rows, unreadable = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            unreadable.append(n)
            continue
        if not (isinstance(entry, dict) and isinstance(entry.get("step"), int) and isinstance(entry.get("data"), dict)):
            problems.append(f"{where}: {name} line {n} is not verl's file logger's {{\"step\": N, \"data\": {{...}}}}; "
                            "the file is not read")
            return None
        rows.append({**{k: math.nan if v is None else float(v) for k, v in entry["data"].items()  # orjson: NaN as null
                        if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}, "step": entry["step"]})
    if unreadable:
        problems.append(f"{where}: {name} line(s) {', '.join(map(str, unreadable[:10]))}"
                        f"{' ...' if len(unreadable) > 10 else ''} unreadable (not JSON); not used")
    return rows


def read_summary(files: list[Path], problems: list[str], where: str) -> pd.DataFrame | None:
    rows = []
    for path in files:
        data = _json(path, problems, where)
        if data is None:
            continue
        if not isinstance(data, dict):
            problems.append(f"{where}: {path.name} is not a JSON object of metrics; not used")
            continue
        numbers = {k: v for k, v in _numbers(data).items() if not k.startswith("_")}  # e.g. wandb-summary.json's _step
        if not numbers:
            problems.append(f"{where}: {path.name} holds no numbers; nothing read")
            continue
        rows.append(numbers)
    if not rows:
        return None
    merged: dict[str, float] = {}
    for r in rows:
        merged.update(r)
    return pd.DataFrame([merged])


READERS = {  # kind -> (file name glob, reader, what it reads)
    "tensorboard": ("events.out.tfevents.*", read_tensorboard, "TensorBoard event files"),
    "trl": ("trainer_state.json", read_trainer_state, "trainer_state.json log history (TRL, HF Trainer)"),
    "verl": (("*.log", "*.out", "*.jsonl"), read_verl, "verl's console log (step:N - key:value) or file logger (.jsonl)"),
    "summary": ("*.json", read_summary, "one JSON object of final numbers per run"),
    "wandb": (LOG_GLOB, read_wandb, "W&B run directories (their run-<id>.wandb logs, read by wandb itself)"),
}
