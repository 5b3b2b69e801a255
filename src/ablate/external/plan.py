"""The seed plan outside ablate: which seeds of which conditions to train next, in the user's own trainer.

`python -m ablate.studies.next_look RUNS --study STUDY.yaml` decides the claims as `python -m ablate.stats`
does on the table (under the registration it finds) and, for each claim still inconclusive whose plan has
a next look, names the seeds its arms lack for that look: new seeds, numbered after the arm's largest, so a
seed is never trained twice. Decided claims add nothing. The new runs go into the table (rows with
`look` = the next look's number keep the looks apart), and the report pools them."""

from __future__ import annotations

from pathlib import Path

from ablate.external.decide import decide_table
from ablate.external.report import read_runs
from ablate.external.tidy import TidyError
from ablate.stats.read.runs import StatsInputError
from ablate.stats.stages.conditions import label_sweep


def next_seeds(runs: Path, study_path: Path, registration: Path | None = None,
               conditions: list[str] | None = None) -> tuple[list[str], int]:
    """(one line per condition to train: its condition, the seeds, why; the next look's number)."""
    tr, _ = read_runs(runs, study_path, conditions)
    study, _, _, labels, _ = label_sweep(tr.sweep, (), False, [])
    if study is None or not study.declared.claims:
        return [], 0
    result = decide_table(tr, study, labels, study.effect or 0.03, registration, Path(runs).parent)
    need = _needs(result.table, {label: cond for cond, label in labels.items()})
    look = max(tr.batches.values(), default=0) + 2  # looks are numbered from 1; the table's last is max + 1
    lines = []
    for cond, target in sorted(need.items()):
        seeds = _seeds(tr, cond)
        missing = target - sum(run.condition == cond for run in tr.sweep.runs)  # every seed counts, numbered or not
        if missing <= 0:
            continue
        start = max(seeds) + 1 if seeds else 0
        claims = result.table[(result.table["condition"] == labels[cond]) | (result.table["baseline"] == labels[cond])]
        ids = ", ".join(claims[claims["verdict"] == "inconclusive"]["id"])
        lines.append(f"{labels[cond]}: train seeds {start}-{start + missing - 1} ({missing} more, to {target} "
                     f"seeds per arm at look {look}; open claim(s): {ids}); add their rows with look={look}")
    return lines, look


def _needs(table, cond_of: dict) -> dict:
    """condition -> the seeds per arm it must reach, for the inconclusive family claims with a next look."""
    need: dict = {}
    for r in table[(table["verdict"] == "inconclusive") & (table["family_size"] > 0)].to_dict("records"):
        if r["next_look"] == r["next_look"]:  # not NaN: the plan has a further look
            for label in (r["condition"], r["baseline"]):
                if label in cond_of:
                    need[cond_of[label]] = max(need.get(cond_of[label], 0), int(r["next_look"]))
    return need


def _seeds(tr, cond) -> list[int]:
    """The whole-number seeds the table has for a condition (others are named by the reader, not numbered after)."""
    out = []
    for run in tr.sweep.runs:
        if run.condition == cond and run.seed is not None and run.seed.lstrip("-").isdigit():
            out.append(int(run.seed))
    return sorted(out)


def main_external(runs: Path, study_path: Path, registration: Path | None, conditions: str | None) -> int:
    cols = [c.strip() for c in conditions.split(",") if c.strip()] if conditions else None
    try:
        lines, _ = next_seeds(runs, study_path, registration, cols)
    except TidyError as exc:
        for line in exc.lines:
            print(f"error: {line}")
        return 2
    except StatsInputError as exc:
        print(f"error: {exc}")
        return 2
    if not lines:
        print("nothing to train: every claim is decided, not testable, at its plan's last look, or stopped by "
              "the plan's futility rule")
        return 0
    for line in lines:
        print(line)
    return 0
