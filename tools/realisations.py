"""Later confirmatory realisations (issue 58): a study whose claims were re-declared after its third edition is
registered again before any new run (`python -m ablate.studies.register experiment=<study> --out
docs/findings/<study>/confirmatory2`, a commit of its own), then run on fresh seeds, and reported there:

    python -m ablate.stats multirun/<study>_confirmatory2 --out docs/findings/<study>/confirmatory2

Its block in findings.md (`<!-- claims:realisations -->`) sets each claim's verdict in the new realisation
beside the third edition's registered one, says what the re-declaration changed in the claim (the two
registrations' blocks, compared), and re-decides the new runs with today's analysis as the third edition's
table does. Both verdicts are registered ones; neither replaces the other."""

from __future__ import annotations

import re
from pathlib import Path

from ablate.stats.claims.registration import read_registration
from tools.confirmatory import SUBDIR, agreement, confirmatory_rows, headline, kept, reanalysis, today_cell, verdict_cell

LATER = re.compile(r"confirmatory(\d+)")
HEADER = ["| realisation | claim | re-declared (third edition -> this one) | third edition (registered) "
          "| this realisation (fresh seeds, registered first) | agree | today's analysis of its runs |",
          "|---|---|---|---|---|---|---|"]


def later_realisations(study_dir: Path) -> list[Path]:
    """The study's realisations after the third edition (`confirmatory2`, `confirmatory3`, ...), in order."""
    found = [(int(m.group(1)), d) for d in Path(study_dir).iterdir() if d.is_dir() and (m := LATER.fullmatch(d.name))]
    return [d for _, d in sorted(found)]


def registered_claims(registration: Path) -> dict[str, dict]:
    """claim id -> its declaration in the registration's binding block ({} without a registration)."""
    if not registration.is_file():
        return {}
    return {c["id"]: c for c in read_registration(registration).records[-1].block.get("claims") or []}


def changed(before: dict | None, after: dict | None) -> str:
    """What the re-declaration changed in one claim: `type: – -> success_rate; ...`, 'the sentence' when only
    its words moved, 'no change', or 'new claim'."""
    if after is None:
        return "–"
    if before is None:
        return "new claim"
    keys = [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    parts = [f"{k}: {before.get(k, '–')} -> {after.get(k, '–')}" for k in keys if k != "claim"]
    parts += ["the sentence"] if "claim" in keys else []
    return "; ".join(parts) or "no change"


def realisations_block(findings_dir: Path) -> str:
    """The markdown block: the headline counts over every later realisation, then one row per claim."""
    rows, pairs, pending, kept_today = list(HEADER), [], [], []
    for study_dir in sorted(p for p in Path(findings_dir).iterdir() if p.is_dir()):
        third = {r["id"]: r for r in confirmatory_rows(study_dir)}
        old = registered_claims(study_dir / SUBDIR / "registration.yaml")
        for folder in later_realisations(study_dir):
            label = f"{study_dir.name}/{folder.name}"
            new_rows = confirmatory_rows(study_dir, folder.name)
            if not new_rows:
                if (folder / "registration.yaml").is_file():
                    pending.append(label)
                continue
            new, today = registered_claims(folder / "registration.yaml"), reanalysis(study_dir, folder.name)
            for r in new_rows:
                b, t = third.get(r["id"]), today.get(r["id"])
                pairs.append((b, r))
                kept_today.append(kept(r, t))
                rows.append(f"| {label} | {r['id']}: {r['claim']} | {changed(old.get(r['id']), new.get(r['id']))} "
                            f"| {verdict_cell(b)} | {verdict_cell(r)} | {agreement(b, r)} | {today_cell(r, t)} |")
    head = "**No later realisation reported yet.**"
    if pairs:
        head = (headline(pairs, over="realisations") + f" Today's analysis keeps "
                f"{sum(kept_today)} of the {len(kept_today)} registered verdicts of the later realisations unchanged.")
    if pending:
        head += f" Registered, runs not yet reported: {', '.join(pending)}."
    return head + "\n\n" + ("\n".join(rows) + "\n" if pairs else "")
