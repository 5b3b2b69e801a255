"""The differences between two study blocks (a registration's and the preset's now), one line each: what
registration records in an amendment and what standing labels a claim by. Pure functions, no I/O."""

from __future__ import annotations

from typing import Any, Mapping

SKIPPED = ("claims", "mechanisms")  # claims are compared one by one; mechanisms describe (not fingerprinted)


def _show(v: Any) -> str:
    return "(none)" if v is None else str(v)


def _claims(block: Mapping | None) -> dict[str, dict]:
    """Claim id -> its fields, with a named precondition resolved (a change to a shared precondition
    changes every claim that rests on it)."""
    named = (block or {}).get("preconditions") or {}
    out = {}
    for raw in (block or {}).get("claims") or []:
        if isinstance(raw, Mapping) and raw.get("id") is not None:
            fields = dict(raw)
            pre = fields.get("precondition")
            if isinstance(pre, str) and isinstance(named, Mapping) and pre in named:
                fields["precondition"] = {"name": pre, **dict(named[pre])}
            out[str(raw["id"])] = fields
    return out


def field_changes(old: Mapping, new: Mapping) -> list[str]:
    """`key: old -> new` for every field that differs (a missing field reads as none)."""
    return [f"{k}: {_show(old.get(k))} -> {_show(new.get(k))}" for k in sorted(set(old) | set(new), key=str)
            if str(old.get(k)) != str(new.get(k))]


def claim_changes(registered: Mapping, current: Mapping) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(amended id -> its diff, added id -> '', removed ids) of the preset's claims against the registration's."""
    before, now = _claims(registered), _claims(current)
    amended = {i: "; ".join(d) for i, c in now.items() if i in before and (d := field_changes(before[i], c))}
    added = {i: "not in the registration" for i in now if i not in before}
    return amended, added, [i for i in before if i not in now]


def block_changes(registered: Mapping, current: Mapping) -> list[str]:
    """Every difference, one line each: study-level fields, then claims changed, added, removed."""
    keys = sorted((set(registered) | set(current)) - set(SKIPPED), key=str)
    out = [f"study.{k}: {_show(registered.get(k))} -> {_show(current.get(k))}" for k in keys
           if str(registered.get(k)) != str(current.get(k))]
    amended, added, removed = claim_changes(registered, current)
    out += [f"claim {i} amended: {d}" for i, d in amended.items()]
    out += [f"claim {i} added" for i in added] + [f"claim {i} removed" for i in removed]
    return out
