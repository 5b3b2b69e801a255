"""The third edition's side-by-side table: each claim's exploratory verdict (the earlier editions' runs,
re-decided by docs/findings' renderer under today's preset) beside its confirmatory verdict (fresh seeds,
decided by `ablate.stats` under a registration committed before those runs), and whether they agree.

A study's confirmatory realisation lives in `docs/findings/<study>/confirmatory/`: registration.yaml
(committed before the runs), and the report `ablate.stats` wrote there (claims.csv, report.md,
runs.jsonl.gz, prompts.csv.gz, ...):

    python -m ablate.stats multirun/<study>_confirmatory --out docs/findings/<study>/confirmatory

Only rows whose standing is `confirmatory` (or `removed after registration`) count: a claim amended or
added after the data is exploratory there too. The table is rendered from the committed claims.csv
files (the rows report.md renders), so `python -m tools.findings --check` holds it in CI.

The committed claims.csv is what the registered analysis decided; it is never replaced. Beside it, a
fifth column re-decides the same archived runs with today's analysis (`reanalysis`: the registration's
code binding, arms aliased with a machine or a time span refused): where the two differ the row says
so, and `--check` fails until the difference is rendered, so no verdict moves silently. The headline
counts the registered verdicts, then says how many of them today's analysis keeps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ablate.stats.claims.standing import ADDED, AMENDED
from ablate.stats.render.formatting import fmt_ci

SUBDIR = "confirmatory"
COUNTED = ("confirmatory", "removed after registration")
DECIDED = ("replicated", "not replicated")
WAITS = "arm not run yet"


def confirmatory_rows(study_dir: Path, sub: str = SUBDIR) -> list[dict]:
    """The confirmatory report's deciding rows (claims.csv), [] when the study has none yet. `sub`: the
    realisation's directory (a later one: `confirmatory2`, ...)."""
    path = study_dir / sub / "claims.csv"
    if not path.is_file():
        return []
    table = pd.read_csv(path)
    return [r for r in table.to_dict("records") if r.get("standing") in COUNTED and r.get("verdict") != "descriptive"]


def reanalysis(study_dir: Path, sub: str = SUBDIR) -> dict[str, dict]:
    """The confirmatory runs (the archive committed beside claims.csv) re-decided by today's analysis under
    the same registration: claim id -> its row; {} when no archive was committed."""
    from ablate.stats.read.archive import RUNS_FILE
    from ablate.stats.read.load import load_sweep
    from ablate.stats.stages.analysis import decide_claims
    from ablate.stats.stages.conditions import group_conditions
    from ablate.stats.stages.settings import Settings

    folder = study_dir / sub
    if not (folder / RUNS_FILE).is_file():
        return {}
    sweep = load_sweep([folder])
    result = decide_claims(group_conditions(sweep, Settings(registration=folder / "registration.yaml",
                                                            report_dir=folder)))
    if result is None:
        return {}
    rows = {r["id"]: r for r in result.table.to_dict("records")}
    for problem in result.problems:  # a registered claim today's declaration checks refuse: said, not dropped
        found = re.search(r"claim '([^']+)'", problem)
        if found and found.group(1) not in rows:
            rows[found.group(1)] = {"id": found.group(1), "verdict": "not testable", "standing": "refused",
                                    "reason": f"today's declaration checks refuse the registered claim: "
                                              f"{problem.split(': ', 1)[-1]}"}
    return rows


def kept(registered: dict, today: dict | None) -> bool:
    """Whether today's analysis keeps a registered confirmatory verdict: same verdict, still confirmatory
    (None: no archive to re-decide, nothing to compare)."""
    return today is None or (today["verdict"] == registered["verdict"] and today.get("standing") in COUNTED)


def today_cell(registered: dict, today: dict | None) -> str:
    if today is None:
        return "–"
    if kept(registered, today):
        return "same"
    if today.get("standing") == "refused":
        return f"**{today['verdict']}**: {today['reason']}"
    if today.get("standing") not in COUNTED:
        why = "exploratory: the runs ran other training code than the registration binds"
        return f"**{today['verdict']}**, {why}" if today["verdict"] == registered["verdict"] else \
            f"**{today['verdict']}** ({why}): {today.get('reason')}"
    return f"**{today['verdict']}**: {today.get('reason')}"


def verdict_cell(r: dict | None) -> str:
    if r is None:
        return "–"
    if pd.isna(r.get("n")):  # not measured on these runs (e.g. a curve window the committed files lack)
        return f"**{r['verdict']}** (no values)"
    n = f"{int(r['n'])} vs {int(r['n_baseline'])}" if pd.notna(r.get("n_baseline")) else f"n {int(r['n'])}"
    return f"**{r['verdict']}** {fmt_ci(r['estimate'], r['ci_low'], r['ci_high'])} ({n})"


def arm_not_run(r: dict) -> bool:
    """A claim the engine left without seeds: an arm of it has no runs yet (a look run arm by arm, as
    004's first look: its plain-SFT and DPO arms before the oracle SFT). It waits; it is not a verdict."""
    return r["verdict"] == "not testable" and pd.isna(r.get("n"))


def agreement(exploratory: dict | None, confirmatory: dict) -> str:
    """'yes' (same verdict), 'no', or 'no (reversed)' when both decided and disagree."""
    if exploratory is None:
        return "new claim"
    if exploratory["verdict"] == confirmatory["verdict"]:
        return "yes"
    both = exploratory["verdict"] in DECIDED and confirmatory["verdict"] in DECIDED
    return "no (reversed)" if both else "no"


def declared_untestable(r: dict) -> bool:
    """A claim its study declared untestable in a precondition (e.g. 002's predictor against a smaller reference
    set than the paper's): no seed count can decide it, so no headline counts it."""
    return r["verdict"] == "not testable" and str(r.get("reason") or "").startswith("precondition declared")


def _were(n: int) -> str:
    return f"{n} claim was" if n == 1 else f"{n} claims were"


def headline(pairs: list[tuple[dict | None, dict]], over: str = "seed sets") -> str:
    """The count that leads: claims decided (replicated / not replicated) on both seed sets and how many agree,
    then decided on one side only, then on neither; declared-untestable claims out of every count."""
    counted = [(b, r) for b, r in pairs if not declared_untestable(r)]
    decided = [(b is not None and b["verdict"] in DECIDED) + (r["verdict"] in DECIDED) for b, r in counted]
    both = [(b, r) for (b, r), d in zip(counted, decided) if d == 2]
    agree = sum(b["verdict"] == r["verdict"] for b, r in both)
    text = (f"**{_were(len(both))} decided on both {over}, and {agree} of them agree.** "
            f"{decided.count(1)} {'was' if decided.count(1) == 1 else 'were'} decided on one side only; "
            f"{decided.count(0)} on neither (inconclusive or not testable on both, or new)")
    declared = [r["id"] for b, r in pairs if declared_untestable(r)]
    return text + (f"; declared untestable, not counted: {', '.join(declared)}." if declared else ".")


def side_by_side(exploratory: dict[Path, pd.DataFrame], findings_dir: Path) -> str:
    """The markdown block: the headline counts, then one row per confirmatory claim of every study.
    `exploratory`: study directory -> its re-decided claims table (findings.render's results)."""
    rows, pairs, pending, waiting, kept_today = [], [], [], [], []
    for study_dir in sorted(p for p in Path(findings_dir).iterdir() if p.is_dir()):
        conf = confirmatory_rows(study_dir)
        if not conf:
            if (study_dir / SUBDIR / "registration.yaml").is_file():
                pending.append(study_dir.name)
            continue
        before = {r["id"]: r for r in exploratory.get(study_dir, pd.DataFrame()).to_dict("records")
                  if r.get("standing") not in ("amended after the data", "added after the data")}
        today = reanalysis(study_dir)
        for r in conf:
            b = before.get(r["id"])
            if arm_not_run(r):
                waiting.append(f"{study_dir.name} {r['id']}")
                rows.append(f"| {study_dir.name} | {r['id']}: {r['claim']} | {verdict_cell(b)} | {WAITS} "
                            f"({r['reason']}) | waits | – |")
                continue
            pairs.append((b, r))
            kept_today.append(kept(r, today.get(r["id"])))
            rows.append(f"| {study_dir.name} | {r['id']}: {r['claim']} | {verdict_cell(b)} | {verdict_cell(r)} | {agreement(b, r)} "
                        f"| {today_cell(r, today.get(r['id']))} |")
    agree = sum(agreement(b, r) == "yes" for b, r in pairs)
    head = (headline(pairs) + f" All rows: {agree} of {len(pairs)} verdicts agree." if pairs
            else "**No confirmatory verdict yet.**")
    if pairs:
        both = [k for (b, r), k in zip(pairs, kept_today) if r["verdict"] in DECIDED and b is not None
                and b["verdict"] in DECIDED and not declared_untestable(r)]
        head += (f" **Today's analysis** (the registration's code binding checked, arms aliased with a machine or a "
                 f"time span refused) keeps {sum(both)} of the {len(both)} decided-on-both verdicts confirmatory and "
                 f"unchanged, and {sum(kept_today)} of all {len(kept_today)} rows (last column).")
    if pending:
        head += f" Registered, runs not yet reported: {', '.join(pending)}."
    if waiting:
        head += f" Waiting for an arm not yet run (not counted): {', '.join(waiting)}."
    table = ["| study | claim | exploratory (earlier editions' seeds) | confirmatory (fresh seeds, registered first) "
             "| agree | today's analysis of the confirmatory runs |", "|---|---|---|---|---|---|", *rows]
    return head + "\n\n" + ("\n".join(table) + "\n" if rows else "")


def deciding(table: pd.DataFrame) -> list[dict]:
    """The rows that decide (the registered version of a claim, not its later amendment)."""
    return [r for r in table.to_dict("records") if r.get("standing") not in (AMENDED, ADDED)]
