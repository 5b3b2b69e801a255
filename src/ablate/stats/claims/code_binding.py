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


def binding(record, statuses: Iterable[Mapping | None]) -> Binding:
    """Whether `record` (the registration version that binds) binds the training code of the runs whose
    status.json are `statuses`, and what the report says about the code."""
    registered = record.code_fingerprints()
    if registered is None:
        return Binding(True, "The registration names no code fingerprint and its commit is not in this "
                             "repository: the training code was not compared.")
    codes = [run_code(s) for s in statuses]
    known = [c for c in codes if c is not None]
    other = sorted({c for c in known if c != registered["training"]})
    unknown = len(codes) - len(known)
    tail = f" ({unknown} run(s) carry no fingerprint and no commit this repository holds: not compared)" if unknown else ""
    analysis = code_fingerprints()["analysis"]
    decided = ("" if analysis == registered["analysis"] else  # the current one unnamed: reports stay stable
               f" Decided by analysis code other than the registered {registered['analysis'][:12]}: a re-analysis.")
    if other:
        n = sum(c in other for c in known)
        return Binding(False, f"{n} of {len(codes)} run(s) ran training code ({', '.join(c[:12] for c in other)}) other "
                              f"than the registered {registered['training'][:12]}{tail}: no verdict is confirmatory "
                              "(amend the registration before the runs to bind new code)." + decided)
    if not known:
        return Binding(True, f"No run's training code could be compared with the registered "
                             f"{registered['training'][:12]}{tail}." + decided)
    return Binding(True, f"Every compared run ran the registered training code {registered['training'][:12]}{tail}."
                   + decided)
