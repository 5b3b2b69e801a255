"""What a reader checks of one value it read from a run directory: a number of its kind, no NaN or
infinity, a short rendering for the message that names it. The files' own checks (status.json in
`status`, summary.json in `summary`) are built from these and stand beside their writers."""

from __future__ import annotations

import math
from typing import Any

COUNT, RATE, NONNEGATIVE = "count", "rate", "nonnegative"  # the kinds of number a key may hold


def show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bad_number(value: Any, kind: str | None = None) -> str | None:
    """Why `value` cannot be a number of `kind` (None if it can): not a number, not finite, out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {show(value)} where a number belongs"
    if not math.isfinite(value):
        return f"{value} (not a finite number)"
    if kind == COUNT and (value < 0 or not float(value).is_integer()):
        return f"{value!r} (a count must be a whole number >= 0)"
    if kind == RATE and not 0 <= value <= 1:
        return f"{value!r} (a share must lie in [0, 1])"
    if kind == NONNEGATIVE and value < 0:
        return f"{value!r} (must be >= 0)"
    return None


def finite(obj: Any, where: str, found: list[str]) -> Any:
    """`obj` with every NaN or infinite number replaced by None (JSON has none), each place in `found`."""
    if isinstance(obj, dict):
        return {k: finite(v, f"{where}/{k}" if where else str(k), found) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v, f"{where}[{i}]", found) for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(f"{where or 'value'} is {obj}")
        return None
    return obj
