"""Each claim's standing: confirmatory (decided as registered before the data) or exploratory.

The registered block decides (ablate.stats.claims.registration): its claims, plan, spending and alpha make the
family. Against the preset the runs are reported with now:
  confirmatory          a registered claim, registered before the first run started;
  amended after the data  a claim whose fields the preset changed since: decided again with the new
                        fields, shown apart, with the diff (the registered version still decides);
  added after the data  a claim the registration does not hold: exploratory;
  removed after registration  a registered claim the preset dropped: still decided and counted in the
                        family (dropping it would shrink the multiplicity after the data);
  exploratory           every claim, when there is no registration, or it was made after the first run
                        started (or the runs' start times are unknown, so the order cannot be shown).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from ablate.stats.claims.aliasing import places_by_label, refuse_aliased
from ablate.stats.claims.block_diff import claim_changes
from ablate.stats.claims.code_binding import Binding, bar_binding, binding
from ablate.stats.claims.declared import Declared, parse_declared
from ablate.stats.claims.engine import sweep_claims
from ablate.stats.claims.registration import (Registration, find_registration, fingerprint, parse_time,
                                              read_registration)

CONFIRMATORY = "confirmatory"
AMENDED = "amended after the data"
ADDED = "added after the data"
REMOVED = "removed after registration"
EXPLORATORY = "exploratory"
def first_start(statuses: Iterable[Mapping | None]) -> datetime | None:
    """The earliest start among the runs' status.json records (every attempt), or None when none says."""
    times = []
    for status in statuses:
        for attempt in [status or {}, *((status or {}).get("history") or [])]:
            t = parse_time(attempt.get("started_at")) if isinstance(attempt, Mapping) and attempt.get("started_at") else None
            if t is not None:
                times.append(t)
    return min(times) if times else None


def _declared(block: Mapping, what: str, problems: list[str]) -> Declared:
    found: list[str] = []
    declared = parse_declared(block, found)
    problems.extend(f"{what}: {p}" for p in found)
    return declared


def _mark(result, standing: str, amendment: dict[str, str] | None = None, keep: set[str] | None = None):
    table, looks = result.table, result.looks
    if keep is not None:
        table, looks = table[table["id"].isin(keep)], looks[looks["id"].isin(keep)]
    table, looks = table.copy(), looks.copy()
    table.insert(list(table.columns).index("verdict") + 1, "standing", standing)
    table["amendment"] = [(amendment or {}).get(i, "") for i in table["id"]]
    looks["standing"] = standing
    return table, looks


def decide(current: Mapping, registration: Registration | None, started: datetime | None,
           evaluate_fn: Callable[[Declared], Any], statuses: Iterable[Mapping | None] | None = None):
    """The ClaimsResult the reports render: the registered block's claims (confirmatory, or exploratory
    when registered late or when runs ran other training code than it binds: `statuses`, the runs'
    status.json; None compares no code), then the preset's amended and added claims (exploratory), with
    `note` saying which registration decided and why."""
    problems: list[str] = []
    if registration is None:
        result = evaluate_fn(_declared(current, "study block", problems))
        result.table, result.looks = _mark(result, EXPLORATORY)
        result.note = ("No registration (registration.yaml): the claims were not registered before the data, so "
                       "every verdict is exploratory. Register with `python -m ablate.studies.register "
                       "experiment=<study>` before the first run.")
        result.problems[:0] = problems
        return result
    record = registration.effective(started)
    late = started is None or record.time is None or record.time > started
    code = binding(record, statuses, registration) if statuses is not None else Binding(True, "")
    bars = bar_binding(record)
    late = late or not code.binds or not bars.binds
    result = evaluate_fn(_declared(record.block, f"the registration {registration.path}", problems))
    amended, added, removed = claim_changes(record.block, current)
    notes = {i: "removed from the preset after registration; still decided and counted in the family"
             for i in removed}
    table, looks = _mark(result, EXPLORATORY if late else CONFIRMATORY, notes)
    if removed:
        table.loc[table["id"].isin(removed), "standing"] = REMOVED if not late else EXPLORATORY
    parts = [(table, looks)]
    if amended or added:
        later = evaluate_fn(_declared(current, "study block", []))  # its problems are the study's own
        parts.append(_mark(later, AMENDED, amended, set(amended)))
        parts.append(_mark(later, ADDED, added, set(added)))
    result.table = pd.concat([p[0] for p in parts], ignore_index=True)
    result.looks = pd.concat([p[1] for p in parts], ignore_index=True)
    when = "the start times of the runs are unknown" if started is None else \
        f"the first run started {started.isoformat(timespec='seconds')}"
    which = "registered" if record is registration.original else f"amended ({len(registration.records) - 1} amendment(s))"
    head = (f"Registration {registration.path} ({which} {record.at}, commit {(record.commit or 'unknown')[:10]}, "
            f"fingerprint {record.fingerprint[:12]}); {when}")
    timely = record.time is not None and started is not None and record.time <= started
    result.note = head + (": registered after the data (or not shown to precede it), so every verdict is exploratory."
                          if not timely else ": the registered claims would be confirmatory, but the code differs."
                          if not code.binds else ": the registered claims would be confirmatory, but a bar's file differs."
                          if not bars.binds else ": the registered claims are confirmatory.")
    result.note += "".join(f" {b.note}" for b in (code, bars) if b.note)
    result.problems[:0] = problems
    if amended or added or removed:
        result.note += (f" The preset changed since: {len(amended)} claim(s) amended, {len(added)} added (exploratory, "
                        f"shown apart), {len(removed)} removed (still in the family).")
    return result


def fingerprint_problems(runs, registration: Registration | None) -> list[str]:
    """Runs that ran under a study block the registration does not hold (status.json study_sha256, or
    the block in their config for runs from before it was recorded)."""
    if registration is None:
        return []
    other = [r.rel for r in runs if r.study is not None and
             ((r.status or {}).get("study_sha256") or fingerprint(r.study)) not in registration.fingerprints]
    if not other:
        return []
    return [f"{len(other)} run(s) ran under a study block that is not the registered one (e.g. {', '.join(other[:3])}): "
            f"their preset changed after {registration.path}"]



def sweep_decided(sweep, study, labels: dict, regimes, effect: float, explicit=None, report_dir=None):
    """`ablate.stats`' claims: the sweep's study decided under its registration, if one is found."""
    path = find_registration(study.name, explicit, report_dir)
    registration = read_registration(path) if path is not None else None
    started = first_start(r.status for r in sweep.runs)
    result = decide(study.block, registration, started,
                    lambda declared: sweep_claims(sweep, declared, labels, regimes, effect),
                    statuses=[r.status for r in sweep.runs if r.ok])
    result.problems += fingerprint_problems(sweep.runs, registration)
    refuse_aliased(result, places_by_label(sweep.runs, labels))
    return result
