"""`python -m ablate.studies.rate_levels`: the exact error rates of `success_rate` claims where studies decide.

A success_rate claim (a recover / collapse outcome, docs/stats.md) reads nothing but each look's counts of
seeds meeting its threshold, so its verdict over a plan is a function of binomial counts, and every error
rate is a finite sum over them: computed exactly here, no simulation. The verdict of each look and count
pair is `engine.look_verdict`'s own (the Newcombe interval and Fisher's exact test at the look's Pocock
level); a claim stops at its first decisive look, as the engine's. Per claim, over its registered plan:

* false 'replicated': both arms' seeds succeed with one probability p (the supremum over p on a grid);
  nominal alpha / 2 (one side);
* false 'not replicated' (futility): the condition's rate differs from the baseline's by exactly the
  claim's effect of interest, in the claimed direction (the supremum over the baseline's rate); nominal
  alpha / 2 (one side of the interval);
* power: 'replicated' at that difference (the infimum over the baseline's rate).

The levels are where the registrations under docs/findings decide: a claim's first level is the study's
alpha times its graph weight (or alpha over the family under Bonferroni); a graph can pass it up to alpha.
calibrate_level.py measures the claims on means by simulation; this is its exact counterpart for rates.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.signal
import scipy.stats
from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import look_verdict
from ablate.stats.claims.registration import read_registration
from ablate.stats.read.runs import StatsInputError
from ablate.studies.calibrate import render_block
from ablate.stats.maths.sequential import nominal_levels

GRID = np.linspace(0.0, 1.0, 101)  # the rates the suprema run over


@dataclass(frozen=True)
class Cell:
    """One success_rate claim of one registration at one of its levels."""
    study: str
    claim: dict  # the claim's entry of the registration's `study.claims`
    looks: tuple[int, ...]
    spending: str
    alpha: float  # the claim's level over the whole plan

    @property
    def label(self) -> str:
        return f"{self.study}: {self.claim['id']}"


def verdict_tables(claim: dict, looks, alpha: float, spending: str = "pocock") -> list[np.ndarray]:
    """Per look n: [n+1, n+1] int8, the engine's verdict with k of the condition's and j of the baseline's n
    seeds meeting the threshold (1 replicated, -1 not replicated, 0 open), at the look's nominal level."""
    problems: list[str] = []
    block = {"alpha": alpha, "test": "randomization", "plan": {"looks": list(looks), "spending": spending},
             "claims": [{**claim, "requires": None, "precondition": None}]}
    parsed = parse_declared(block, problems).claims[0]
    if problems:
        raise ValueError(f"claim {claim.get('id')!r}: {'; '.join(problems)}")
    levels = nominal_levels([n / looks[-1] for n in looks], alpha, spending)
    return [look_table(parsed, n, a) for n, a in zip(looks, levels)]


def look_table(claim, n: int, a: float) -> np.ndarray:
    """[n+1, n+1] int8: `engine.look_verdict` of a parsed success_rate claim at one look of n vs n seeds at
    nominal level a, with k of the condition's and j of the baseline's seeds meeting the threshold (1
    replicated, -1 not replicated, 0 open). A rate claim reads counts only: its exact tests are its own
    whatever the study's `test`."""
    t = np.zeros((n + 1, n + 1), dtype=np.int8)
    for k in range(n + 1):
        for j in range(n + 1):
            xs, ys = (np.r_[np.ones(c), np.zeros(n - c)] for c in (k, j))
            v = look_verdict(claim, xs, ys, a)[1]
            t[k, j] = 1 if v == "replicated" else -1 if v == "not replicated" else 0
    return t


def plan_outcome(tables: list[np.ndarray], looks, p_condition: float, p_baseline: float) -> tuple[float, float]:
    """(P replicated, P not replicated) over the plan, exactly: the still-open mass over count pairs is
    carried from look to look, each look adding Binomial(new seeds, p) successes to either arm."""
    open_mass, before = np.ones((1, 1)), 0
    replicated = not_replicated = 0.0
    for n, table in zip(looks, tables):
        new = np.arange(n - before + 1)
        step = np.outer(scipy.stats.binom.pmf(new, n - before, p_condition),
                        scipy.stats.binom.pmf(new, n - before, p_baseline))
        mass = scipy.signal.convolve2d(open_mass, step)
        replicated += float(mass[table == 1].sum())
        not_replicated += float(mass[table == -1].sum())
        mass[table != 0] = 0.0
        open_mass, before = mass, n
    return replicated, not_replicated


def error_rates(cell: Cell) -> dict:
    """The cell's three figures (module docstring) and the rates they were at their worst."""
    tables = verdict_tables(cell.claim, cell.looks, cell.alpha, cell.spending)
    s = -1.0 if cell.claim.get("direction") == "lower" else 1.0
    effect = float(cell.claim["effect"])
    null = [(plan_outcome(tables, cell.looks, p, p)[0], p) for p in GRID]
    shifted = [(plan_outcome(tables, cell.looks, p + s * effect, p), p) for p in GRID if 0 <= p + s * effect <= 1]
    false_rep, p_rep = max(null)
    false_nrep, p_nrep = max((out[1], p) for out, p in shifted)
    power, p_power = min((out[0], p) for out, p in shifted)
    return {"study": cell.study, "claim": cell.claim["id"], "looks": "/".join(map(str, cell.looks)),
            "alpha": cell.alpha, "nominal": cell.alpha / 2, "false_replicated": false_rep, "at_rate": p_rep,
            "false_not_replicated": false_nrep, "at_baseline_rate": p_nrep, "power": power,
            "power_at_baseline_rate": p_power}


def cells_of(path: Path) -> list[Cell]:
    """A registration's success_rate claims at their first level and, under a graph, at the whole alpha: its
    latest version (an amendment made before the runs binds them), read and checked as ablate.stats does."""
    study = read_registration(path).records[-1].block
    problems: list[str] = []
    declared = parse_declared(study, problems)
    family = [c.id for c in declared.claims if c.in_family]
    looks, spending = tuple(declared.plan.looks), declared.plan.spending
    graph, budget = declared.multiplicity, declared.budget  # alpha over the realisations of the claims
    out = []
    for raw in study.get("claims") or []:
        if raw.get("type") != "success_rate" or raw["id"] not in family:
            continue
        if graph is None:
            levels = [budget / len(family)]
        else:
            levels = [budget * float(graph.weights[graph.ids.index(raw["id"])]), budget]
        out += [Cell(study.get("name", path.parent.name), raw, looks, spending, a) for a in levels if a > 0]
    return out


def markdown(rows: list[dict]) -> str:
    head = ("| claim | plan | level | nominal per side | false 'replicated' (equal rates; worst p) | "
            "false 'not replicated' (difference = effect; worst baseline rate) | power at the effect (worst) |")
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        ratio = r["false_not_replicated"] / r["nominal"]
        lines.append(f"| {r['study']}: {r['claim']} | {r['looks']} | {r['alpha']:.4g} | {r['nominal']:.4g} | "
                     f"{r['false_replicated']:.2g} ({r['at_rate']:.2f}) | {r['false_not_replicated']:.2g} "
                     f"({r['at_baseline_rate']:.2f}; {ratio:.2f}x{' ✗' if ratio > 1 else ''}) | "
                     f"{r['power']:.2f} ({r['power_at_baseline_rate']:.2f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablate.studies.rate_levels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("registrations", nargs="*", type=Path,
                        help="registration.yaml files (default: every one under docs/findings)")
    parser.add_argument("--doc", type=Path, help="write the table into this file's <!-- rate_levels --> block "
                        "(docs/stats.md) instead of printing it")
    args = parser.parse_args(argv)
    paths = args.registrations or sorted(Path("docs/findings").glob("**/registration.yaml"))
    if not paths:
        print("rate_levels: no registration.yaml given or under docs/findings", file=sys.stderr)
        return 2
    cells: dict[tuple, list[Cell]] = {}  # one computation for a claim registered alike in several studies
    for path in paths:
        try:
            found = cells_of(path)
        except StatsInputError as exc:  # damaged or hand-edited: one line, nothing computed from it
            print(f"rate_levels: {exc}", file=sys.stderr)
            return 2
        for cell in found:
            key = (repr(sorted(cell.claim.items())), cell.looks, cell.spending, round(cell.alpha, 12))
            cells.setdefault(key, []).append(cell)
    rows = []
    for same in cells.values():  # one row per claim, naming every registration that decides it so
        rows.append({**error_rates(same[0]), "study": ", ".join(dict.fromkeys(c.study for c in same))})
        print(f"{same[0].label} at {same[0].alpha:.4g}: done", file=sys.stderr, flush=True)
    return render_block((markdown(rows) + "\n") if rows else "no success_rate claim in the registrations given",
                        args.doc, "rate_levels")


if __name__ == "__main__":
    sys.exit(main())
