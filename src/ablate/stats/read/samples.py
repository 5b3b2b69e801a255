"""Reading one eval regime's samples.jsonl (one JSON object per prompt: id, n, n_correct and the optional
counts ablate.metrics reads) into a `PromptTable`. Every line is checked against that schema; a line
that fails is skipped and named, never raised on (a crashed run's truncated last line is the usual one)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.stats.read.runs import PromptTable
from ablate.tasks.base import OPERANDS

# status.json, summary.json, the .hydra files and multirun.yaml are kilobytes; PyYAML reads ~1 MB/s
MAX_SMALL_FILE = 8 << 20


def short(exc: BaseException, limit: int = 160) -> str:
    """An exception's first line, at most `limit` characters: for one-line problem reports."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def whole(value) -> int | None:
    """A whole number (an int, or a float with no fraction) as int; None for anything else, bools included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def number(v) -> float | None:
    """A finite int or float as float; None for anything else, bools included."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _n_numbers(row: dict) -> int | None:
    diff = row.get("difficulty")
    for v in (row.get("n_numbers"), diff.get("n_numbers") if isinstance(diff, dict) else None):
        if whole(v) is not None:
            return whole(v)
    nums = row.get("numbers")
    return len(nums) if isinstance(nums, list) else None


def load_samples(path: Path, issues: list[str], what: str, level: tuple[str, str] = OPERANDS) -> PromptTable | None:
    """Read samples.jsonl with pandas and check it against its schema (id; whole n >= 1; 0 <= n_correct
    <= n; 0 <= n_answered <= n when given). Lines that fail are skipped and named (line numbers) in
    `issues`, so are lines that are not JSON objects (a crashed run's truncated last line)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        issues.append(f"{what}: unreadable ({short(exc)})")
        return None
    bad: list[tuple[int, str]] = []
    lines, rows = _json_rows(text, bad)
    good, dupes = _checked(lines, rows, bad)
    if bad:
        bad.sort()
        shown = ", ".join(f"line {ln} ({why})" for ln, why in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        issues.append(f"{what}: skipped {len(bad)} bad line(s): {shown}{more}")
    if dupes:
        issues.append(f"{what}: {len(dupes)} duplicate prompt id(s) ignored (first at line {dupes[0]})")
    if not good:
        issues.append(f"{what}: no usable prompt lines")
        return None
    cols = _columns(good, level[0])
    if "n_answered" in cols and np.any(cols["n_correct"] > cols["n_answered"]):
        issues.append(f"{what}: some prompts have n_correct > n_answered (precision above 1)")
    return PromptTable(np.asarray([str(r["id"]) for r in good], dtype=object), cols, level[1])


def _json_rows(text: str, bad: list) -> tuple[list, list[dict]]:
    """(line number, line) and the parsed row of every JSON-object line; the others go to `bad`."""
    lines = [(i, line) for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    try:
        frame = pd.read_json(io.StringIO(text), lines=True, dtype=False)
    except (ValueError, TypeError):  # some line is not a JSON object: name it, read the others
        kept = []
        for lineno, line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad.append((lineno, "invalid JSON"))
                continue
            if not isinstance(obj, dict):
                bad.append((lineno, "not a JSON object"))
                continue
            kept.append((lineno, line))
        lines = kept
        frame = pd.read_json(io.StringIO("\n".join(line for _, line in kept)), lines=True, dtype=False)
    rows = frame.to_dict("records")
    for key in ("id", "n", "n_correct", "n_answered"):  # pandas fills a key some lines lack with NaN
        for row in rows:
            if isinstance(row.get(key), float) and math.isnan(row[key]):
                row[key] = None
    return lines, rows


def _checked(lines, rows, bad: list) -> tuple[list[dict], list[int]]:
    """The rows that pass the schema (first of each id), and the line numbers of duplicate ids."""
    good, dupes, seen = [], [], set()
    for (lineno, _), row in zip(lines, rows):
        n, c, a = whole(row.get("n")), whole(row.get("n_correct")), row.get("n_answered")
        if row.get("id") is None or n is None or c is None:
            bad.append((lineno, "missing id, n or n_correct"))
        elif n < 1 or not 0 <= c <= n:
            bad.append((lineno, f"inconsistent counts n={n}, n_correct={c}"))
        elif a is not None and (whole(a) is None or not 0 <= whole(a) <= n):
            bad.append((lineno, f"inconsistent n_answered={a!r}"))
        elif (why := _bad_optional(row, n)) is not None:
            bad.append((lineno, why))
        elif str(row["id"]) in seen:
            dupes.append(lineno)
        else:
            seen.add(str(row["id"]))
            good.append({**row, "n": n, "n_correct": c})
    return good, dupes


def _bad_optional(row: dict, n: int) -> str | None:
    """Why a line's optional counts cannot be used (None if they can): the columns ablate.metrics reads."""
    for key in ("mean_length", "tool_calls", "n_calc"):
        value = row.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):  # pandas' fill: absent
            if number(value) is None or value < 0 or (key == "n_calc" and value > n):
                return f"{key}={str(value)[:30]!r} is not a number in range"
    verdicts = row.get("verdicts")
    if isinstance(verdicts, float) and math.isnan(verdicts):  # pandas' fill where a line has none
        verdicts = None
    if verdicts is not None and not (isinstance(verdicts, dict) and all(
            whole(v) is not None and 0 <= v <= n for v in verdicts.values())):
        return f"verdicts={str(verdicts)[:40]!r} are not counts in [0, n]"
    return None


def _columns(good: list[dict], level_column: str = "n_numbers") -> dict[str, np.ndarray]:
    """Every column every good line has: the counts, the optional ones (ablate.metrics reads), the level as n_numbers."""
    level = _n_numbers if level_column == "n_numbers" else (lambda r: whole(r.get(level_column)))
    getters = {"n": lambda r: r["n"], "n_correct": lambda r: r["n_correct"],
               "n_answered": lambda r: whole(r.get("n_answered")), "n_numbers": level,
               **{key: (lambda r, key=key: number(r.get(key))) for key in ("mean_length", "tool_calls", "n_calc")}}
    verdicts = sorted({str(k) for r in good if isinstance(r.get("verdicts"), dict) for k in r["verdicts"]})
    for name in verdicts:
        getters[f"verdict/{name}"] = lambda r, name=name: (number(r["verdicts"].get(name, 0))
                                                           if isinstance(r.get("verdicts"), dict) else None)
    cols: dict[str, np.ndarray] = {}
    for key, get in getters.items():  # a column is known when every line has it
        values = [get(r) for r in good]
        if all(v is not None for v in values):
            cols[key] = np.asarray(values, dtype=np.float64)
    return cols
