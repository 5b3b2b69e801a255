"""Does the registration bind the code the runs ran? (issue 58: registrations that bind the code)

The registration records the fingerprints of the training and the analysis code (ablate.rundir.code); each
run records the fingerprint of the training code it ran (status.json `code`; a run from before that is
compared through its `git_sha`, where the repository holds that commit). A run whose training code differs
from the binding registration's is not confirmatory: its claims are decided, and shown exploratory, unless
the registration was amended (binding the new code) before the first run started. The analysis code is
compared too: a report decided by other analysis code than the registered one says it is a re-analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ablate.rundir.code import code_fingerprints, fingerprints_at
from ablate.stats.claims.measured_bar import digests
from ablate.stats.claims.registration import parse_time


@dataclass
class Binding:
    binds: bool  # False: some run ran training code other than the registered
    note: str  # one sentence for the report, '' when there is nothing to say


def run_code(status: Mapping | None) -> str | None:
    """The training code fingerprint a run ran: recorded, or derived from its commit; None if unknown."""
    status = status or {}
    code = status.get("code")
    if isinstance(code, Mapping) and isinstance(code.get("training"), str):
        return code["training"]
    derived = fingerprints_at(status.get("git_sha"))
    return derived["training"] if derived else None


def binding(record, statuses: Iterable[Mapping | None], registration=None) -> Binding:
    """Whether the registration binds the training code of the runs whose status.json are `statuses`, and
    what the report says about the code. Each run is held to the version in force when it started (with
    `registration`: the last record made before its `started_at`, so an amendment between looks binds the
    later look's runs, never the earlier ones'); without it, or a run without a start time, to `record`
    (the version that binds the study: the last one before its first run)."""
    registered = record.code_fingerprints()
    if registered is None:
        return Binding(True, "The registration names no code fingerprint and its commit is not in this "
                             "repository: the training code was not compared.")
    statuses = list(statuses)
    pairs = [(run_code(s), _bound(record, registration, s)) for s in statuses]
    known = [(ran, want) for ran, want in pairs if ran is not None and want is not None]
    other = sorted({ran for ran, want in known if ran != want})
    unknown = len(pairs) - len(known)
    tail = f" ({unknown} run(s) carry no fingerprint and no commit this repository holds: not compared)" if unknown else ""
    later = sum(ran == want != registered["training"] for ran, want in known)
    later_note = f" {later} run(s) ran the code a later amendment bound before they started." if later else ""
    analysis = code_fingerprints()["analysis"]
    decided = ("" if analysis == registered["analysis"] else  # the current one unnamed: reports stay stable
               f" Decided by analysis code other than the registered {registered['analysis'][:12]}: a re-analysis.")
    if other:
        n = sum(ran != want for ran, want in known)
        return Binding(False, f"{n} of {len(pairs)} run(s) ran training code ({', '.join(c[:12] for c in other)}) other "
                              f"than the registered {registered['training'][:12]} (or the amendment in force when they started){tail}: "
                              "no verdict is confirmatory "
                              "(amend the registration before the runs to bind new code)." + later_note + decided)
    if not known:
        return Binding(True, f"No run's training code could be compared with the registered "
                             f"{registered['training'][:12]}{tail}." + decided)
    return Binding(True, f"Every compared run ran the registered training code {registered['training'][:12]} (or "
                         f"the amendment in force when it started){tail}." + later_note + decided)


def _bound(record, registration, status: Mapping | None) -> str | None:
    """The training fingerprint the registration bound when this run started."""
    start = parse_time((status or {}).get("started_at")) if registration is not None else None
    version = registration.effective(start) if start is not None else record
    code = version.code_fingerprints()
    return code["training"] if code else None


def bar_binding(record) -> Binding:
    """Whether the evaluation files the registered claims read their bars from (`against_eval`) are the bytes
    the registration bound: a file changed since moves a bar after the data could be seen, so its claims'
    verdicts are not confirmatory (restore the file from git, or amend before the runs)."""
    bound = record.bars or {}
    moved = sorted(source for source, sha in digests(record.block).items() if bound.get(source) != sha)
    if not moved:
        return Binding(True, "")
    return Binding(False, f"The bar file(s) {', '.join(moved)} differ from the registered bytes (sha256 "
                          f"{', '.join(bound.get(m, 'unbound')[:12] for m in moved)}): no verdict is confirmatory "
                          "(restore them from git, or amend the registration before the runs).")
