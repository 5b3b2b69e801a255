"""Verdicts refused when an arm is aliased with where or when it ran.

A two-sample verdict compares two arms' seeds. When every run of one arm ran on one machine kind (or torch
build, or in one time span) and every run of the other arm on another, the difference the test sees is
the arm's *or* the machine's (its kernels, its rounding), the build's or the load of that hour: no
verdict can say which. Such a verdict is refused ("not testable", the reason saying why), for ablate's
own run directories and for external tables alike. Arms that share a machine kind, a build and a time
span (seeds interleaved, whole seeds on each machine) are compared as usual; ablate.stats.read.runs'
`unbalanced_machines` still warns when the balance is partial.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from ablate.stats.claims.registration import parse_time
from ablate.stats.read.runs import Run

REFUSED = "refused"


def place(run: Run) -> dict:
    """Where and when a run ran, as far as its files say (None where they do not): `machine` (the
    accelerator, with the CPU's kernel level on a CPU build, as ablate.stats.read.runs.machine), `torch` (the build) and
    `start` (the first attempt's start)."""
    config, status = run.config or {}, run.status or {}
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    versions = status.get("versions") if isinstance(status.get("versions"), dict) else {}
    accelerator, torch = trainer.get("accelerator"), versions.get("torch")
    machine = None if accelerator is None else str(accelerator)
    if machine is not None and str(torch).endswith("+cpu") and versions.get("cpu_capability"):
        machine += f", {versions['cpu_capability']}"  # a CPU build's kernels differ by the CPU's level
    history = status.get("history") if isinstance(status.get("history"), list) else []
    starts = [parse_time(a.get("started_at")) for a in history if isinstance(a, Mapping)]
    starts = [t for t in starts + [parse_time(status.get("started_at"))] if t is not None]
    return {"machine": machine, "torch": None if torch is None else str(torch),
            "start": min(starts) if starts else None}


def aliasing(arm: Sequence[Mapping], other: Sequence[Mapping]) -> str | None:
    """Why two arms (their runs' `place`s) cannot be compared, or None: no machine kind, torch build or
    time span shared. Each key is read only where every run of both arms names it."""
    for key, what in (("machine", "machines"), ("torch", "torch versions")):
        a, b = {p.get(key) for p in arm}, {p.get(key) for p in other}
        if None not in a | b and a.isdisjoint(b):
            return f"the arms ran on different {what} ({', '.join(sorted(a))} vs {', '.join(sorted(b))})"
    ta, tb = [p.get("start") for p in arm], [p.get("start") for p in other]
    if not ta or not tb or None in ta + tb:
        return None
    first, second = (ta, tb) if max(ta) < min(tb) else (tb, ta) if max(tb) < min(ta) else (None, None)
    if first is None:
        return None
    return (f"the arms ran in separate time spans (one's runs all started by {_iso(max(first))}, the other's "
            f"from {_iso(min(second))}): interleave them (every arm's seed s before any arm's seed s+1)")


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def refuse_aliased(result, places: Mapping[str, Sequence[Mapping]]) -> None:
    """Two-sample verdicts of `result` (a ClaimsResult) whose arms `aliasing` separates become `not
    testable`, the reason saying why and what it would have been; one problem line each (descriptive
    rows decide nothing and stay). `places`:
    condition label -> its usable runs' places."""
    t, looks = result.table, result.looks
    for i in t.index:
        arm, other = places.get(t.at[i, "condition"]), places.get(t.at[i, "baseline"])
        if not arm or not other or t.at[i, "verdict"] in ("not testable", "descriptive"):
            continue
        why = aliasing(arm, other)
        if why is None:
            continue
        was = t.at[i, "verdict"]
        t.at[i, "verdict"] = "not testable"
        t.at[i, "reason"] = f"{REFUSED} ({was} otherwise): {why}"
        result.problems.append(f"claim {t.at[i, 'id']}: {REFUSED}, {why}")
        looks.loc[looks["id"] == t.at[i, "id"], "verdict"] = "not testable"


def places_by_label(runs: Sequence[Run], labels: Mapping) -> dict[str, list[dict]]:
    """Condition label (as the claims table names arms) -> the places of its usable runs."""
    out: dict[str, list[dict]] = {}
    for run in runs:
        if run.ok:
            out.setdefault(labels.get(run.condition, run.label), []).append(place(run))
    return out
