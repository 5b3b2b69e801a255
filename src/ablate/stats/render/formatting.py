"""Number and table formatting shared by every renderer (markdown, console, findings)."""

from __future__ import annotations

import math
import re
from typing import Iterable

import numpy as np


def fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}f}"


def fmt_p(p) -> str:
    if p is None or not np.isfinite(p):
        return "–"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def fmt_ci(value, low, high, digits: int = 3) -> str:
    if low is None or not (np.isfinite(low) and np.isfinite(high)):
        return fmt(value, digits)
    return f"{fmt(value, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def md_table(header: list[str], rows: Iterable[list]) -> str:
    def cell(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def twins(keys: dict) -> dict[str, list[str]]:
    """From metric -> its values in a fixed order (a hashable key), to each metric kept -> the later metrics
    with the same values. pass@1, exact_pass@1 and precision coincide when every answer is well formed: a
    report shows one column or panel headed with all three rather than three identical ones."""
    kept: dict[str, list[str]] = {}
    first_of: dict = {}
    for metric, key in keys.items():
        if key and key in first_of:
            kept[first_of[key]].append(metric)
        else:
            first_of.setdefault(key, metric)
            kept[metric] = []
    return kept


def pct(confidence: float) -> str:
    """A confidence level as the reports write it: 0.95 -> "95%"."""
    return f"{confidence * 100:g}%"
