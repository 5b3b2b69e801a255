"""A study's registration: its `study:` block frozen before the first run, kept by the tool.

`python -m ablate.studies.register experiment=<study>` writes `registration.yaml` (the composed block,
the commit, the UTC time and the block's fingerprint); every run records the fingerprint of the block
it ran under (status.json `study_sha256`). `ablate.stats` decides with the registered block: a claim
the preset changed or added later is *amended after the data* (exploratory), a registered claim the
preset dropped stays in the family (ablate.stats.claims.standing). The file is written atomically and checked
when read (its fingerprint must match its block), and an existing registration is never overwritten:
`--amend` appends an amendment and keeps the original.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from ablate.rundir.atomic import write_text
from ablate.rundir.code import code_fingerprints, fingerprints_at
from ablate.stats.claims.block_diff import block_changes
from ablate.stats.claims.measured_bar import digests
from ablate.stats.read.runs import StatsInputError

FILE = "registration.yaml"
CODE_PARTS = ("training", "analysis")
FORMAT = 1


def canonical(block: Mapping) -> str:
    """The block as sorted, compact JSON: what the fingerprint hashes (key order and YAML style aside)."""
    return json.dumps(block, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


DESCRIPTIVE = ("mechanisms",)  # study keys that describe and decide nothing: not part of what is registered


def fingerprint(block: Mapping | None) -> str | None:
    """sha256 of the block's canonical JSON, less its descriptive keys (declaring a mechanism to describe
    after the runs is not an amendment of what decides)."""
    if block is None:
        return None
    deciding = {k: v for k, v in block.items() if k not in DESCRIPTIVE}
    return hashlib.sha256(canonical(deciding).encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parse_time(text: Any) -> datetime | None:
    try:
        t = datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


@dataclass
class Record:
    """One registered version of the block: the original, or an amendment."""

    block: dict
    fingerprint: str
    at: str
    commit: str | None
    changes: list[str] = field(default_factory=list)  # an amendment's differences from the version before
    code: dict | None = None  # the code's fingerprints when registered (ablate.rundir.code); None: older files
    bars: dict | None = None  # {file: sha256} of the evaluations its claims' bars are read from (against_eval)

    def code_fingerprints(self) -> dict | None:
        """The registered code's fingerprints: recorded, or (registrations from before they were) derived
        from the registered commit through git where the repository is at hand."""
        if self.code:
            return self.code
        return fingerprints_at(self.commit)  # git, only for registrations that predate `code`

    @property
    def time(self) -> datetime | None:
        return parse_time(self.at)


@dataclass
class Registration:
    study: str
    records: list[Record]  # the original first, then each amendment in the order made
    path: Path | None = None

    @property
    def original(self) -> Record:
        return self.records[0]

    def effective(self, first_start: datetime | None) -> Record:
        """The version that binds: the last one made before the first run started (an amendment made
        before any data is still a registration); the original when start times are unknown."""
        if first_start is None:
            return self.original
        before = [r for r in self.records if r.time is not None and r.time <= first_start]
        return before[-1] if before else self.original

    @property
    def fingerprints(self) -> set[str]:
        return {r.fingerprint for r in self.records}


def _record_dict(r: Record, kind: str) -> dict:
    out = {"kind": kind, "registered_at" if kind == "original" else "amended_at": r.at, "commit": r.commit,
           "fingerprint": r.fingerprint}
    if r.code:
        out["code"] = dict(r.code)
    if r.bars:
        out["bars"] = dict(r.bars)
    if kind != "original":
        out["changes"] = list(r.changes)
    out["study"] = r.block
    return out


def to_yaml(reg: Registration) -> str:
    body = {"format": FORMAT, "study_name": reg.study, **_record_dict(reg.original, "original"),
            "amendments": [_record_dict(r, "amendment") for r in reg.records[1:]]}
    head = ("# Written by `python -m ablate.studies.register`; never edit by hand (the fingerprint is checked).\n"
            "# ablate.stats decides with this block: later changes to the preset's claims are exploratory.\n")
    return head + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=120)


def _record(raw: Mapping, kind: str, where: str) -> Record:
    block = raw.get("study")
    if not isinstance(block, dict):
        raise StatsInputError(f"{where}: no `study` mapping; re-register with python -m ablate.studies.register")
    want = fingerprint(block)
    if raw.get("fingerprint") != want:
        raise StatsInputError(f"{where}: fingerprint {raw.get('fingerprint')!r} does not match its study block "
                              f"({want}): the file was edited by hand; restore it from git")
    at = raw.get("registered_at" if kind == "original" else "amended_at")
    if parse_time(at) is None:
        raise StatsInputError(f"{where}: no readable time ({at!r}); restore it from git")
    code = raw.get("code")
    if code is not None and not (isinstance(code, dict) and all(isinstance(code.get(k), str) for k in CODE_PARTS)):
        raise StatsInputError(f"{where}: `code` must map {' and '.join(CODE_PARTS)} to fingerprints, got {code!r}; "
                              "restore it from git")
    bars = raw.get("bars")
    if bars is not None and not (isinstance(bars, dict) and all(isinstance(v, str) for v in bars.values())):
        raise StatsInputError(f"{where}: `bars` must map each bar's file to its sha256, got {bars!r}; restore it from git")
    return Record(block, want, str(at), raw.get("commit"), [str(c) for c in raw.get("changes") or []], code, bars)


def read_registration(path: Path) -> Registration:
    """The registration at `path`, checked: each version's fingerprint must match its block."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise StatsInputError(f"cannot read the registration {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise StatsInputError(f"{path} is not a registration (format {FORMAT}) written by python -m ablate.studies.register")
    records = [_record(raw, "original", str(path))]
    for i, amendment in enumerate(raw.get("amendments") or [], 1):
        records.append(_record(amendment if isinstance(amendment, Mapping) else {}, "amendment",
                               f"{path} amendment {i}"))
    return Registration(str(raw.get("study_name") or records[0].block.get("name") or "unnamed study"), records, Path(path))


def register(path: Path, block: dict, *, amend: bool = False, commit: str | None = None,
             now: str | None = None, code: dict | None = None) -> Registration:
    """Write (or, with `amend`, add an amendment to) the registration at `path`, atomically, with the
    fingerprints of the code that will train and decide (`code`, default: this checkout's)."""
    now = now or utc_now()
    record = Record(block, fingerprint(block), now, commit, code=dict(code or code_fingerprints()),
                    bars=digests(block) or None)
    if Path(path).exists():
        if not amend:
            raise StatsInputError(f"{path} exists (registered {read_registration(path).original.at}): a "
                                  "registration is never overwritten; pass --amend to record an amendment")
        reg = read_registration(path)
        last = reg.records[-1]
        moved = [f"{part} code {(last.code_fingerprints() or {}).get(part, 'unknown')[:12]} -> {record.code[part][:12]}"
                 for part in CODE_PARTS if (last.code_fingerprints() or {}).get(part) != record.code[part]]
        moved += [f"bar {source} {(last.bars or {}).get(source, 'unbound')[:12]} -> {sha[:12]}"
                  for source, sha in (record.bars or {}).items() if (last.bars or {}).get(source) != sha]
        if record.fingerprint == last.fingerprint and not moved:
            raise StatsInputError(f"{path}: the study block and the code are unchanged since the last registered "
                                  "version; nothing to amend")
        record.changes = (block_changes(last.block, block) if record.fingerprint != last.fingerprint else []) + moved
        record.changes = record.changes or ["(formatting only)"]
        reg.records.append(record)
    elif amend:
        raise StatsInputError(f"{path} does not exist: nothing to amend; register without --amend")
    else:
        reg = Registration(str(block.get("name") or "unnamed study"), [record], Path(path))
    write_text(path, to_yaml(reg))
    read_registration(path)  # what a reader will trust must read back
    return reg


def find_registration(study_name: str, explicit: Path | None = None, out: Path | None = None) -> Path | None:
    """Where `ablate.stats` looks: --registration (a file or its directory), then beside the report
    (--out), then docs/findings/<study>/ under the working directory."""
    if explicit is not None:
        path = explicit / FILE if explicit.is_dir() else explicit
        if not path.is_file():
            raise StatsInputError(f"--registration {explicit}: no {FILE} there")
        return path
    for folder in ([out] if out is not None else []) + [Path("docs/findings") / study_name]:
        if (folder / FILE).is_file():
            return folder / FILE
    return None
