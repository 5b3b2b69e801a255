"""The terminal summary of a report: the claims first, then each condition's headline metric."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.stats.render.claims import claims_console
from ablate.stats.render.formatting import fmt_ci, pct

if TYPE_CHECKING:
    from ablate.stats.stages.analysis import Analysis
    from ablate.stats.stages.conditions import Conditions
    from ablate.stats.stages.summary import Summary

MAX_CONSOLE_WARNINGS = 20


def _true(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and bool(x)


def run_warnings(inventory: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(condition, run, text) for every warning a run wrote into its status.json (runs.csv's `warnings`)."""
    return [(r.condition, r.run, w) for r in inventory.itertuples() if r.warnings
            for w in r.warnings.split(" | ")]


def print_summary(a: Analysis, written: dict[str, Path], console=None) -> None:
    """The study and its claims, the first compared metric per condition and regime with its comparison,
    then counts of what the report lists (runs left out, run warnings, data problems) and where it is."""
    console = console or Console()
    c = a.conditions
    if c.study is not None:
        console.print(escape(f"Study {c.study.name}" + (f": {c.study.question}" if c.study.question else "")),
                      highlight=False, soft_wrap=True)
    if a.claims is not None:
        claims_console(a.claims, console)
    console.print(_conditions_table(c, a.summary, a.comparisons.table))
    if len(a.comparisons.table):
        console.print(f"significant: Welch's test on per-seed values at α={c.settings.alpha:g} after Holm "
                      "correction over this table (descriptive; the claims table decides)")
    left_out = int((c.inventory["outcome"] != "ok").sum()) if len(c.inventory) else 0
    if left_out:
        console.print(f"[yellow]{left_out} run(s) not included (failed, running or missing); "
                      "listed in the report.[/yellow]")
    found = run_warnings(c.inventory)
    for cond, run, text in found[:MAX_CONSOLE_WARNINGS]:
        console.print(f"[yellow]warning[/yellow] {escape(f'{cond} ({run}): {text}')}", highlight=False,
                      soft_wrap=True)
    if len(found) > MAX_CONSOLE_WARNINGS:
        console.print(f"[yellow]... and {len(found) - MAX_CONSOLE_WARNINGS} more run warning(s); listed in the "
                      "report.[/yellow]")
    if a.problems:
        console.print(f"[yellow]{len(a.problems)} data problem(s); listed in the report.[/yellow]")
    report = written.get("report.md") or written.get("report.json")
    if report is not None:
        console.print(f"Report: {report}", highlight=False, soft_wrap=True)


def _conditions_table(c: Conditions, summary: Summary, comparisons: pd.DataFrame):
    """Per condition and regime: the first compared metric [CI] and its difference from the baseline."""
    metric = c.settings.metrics[0]
    table = Table(title=f"{c.sweep.name}: {metric}, mean over seeds [{pct(c.settings.confidence)} CI]")
    for col, justify in [("condition", "left"), ("runs ok", "right"), ("regime", "left"), (metric, "right"),
                         ("Δ vs baseline", "right"), ("", "left")]:
        table.add_column(col, justify=justify)
    rows = summary.table[(summary.table["level"] == "condition") & (summary.table["metric"] == metric)]
    cmp = comparisons[comparisons["metric"] == metric] if len(comparisons) else comparisons
    for r in c.table.itertuples():
        first = True
        for regime in c.regimes or [""]:
            x = rows[(rows["condition"] == r.condition) & (rows["regime"] == regime)]
            value = fmt_ci(*x[["value", "ci_low", "ci_high"]].iloc[0]) if len(x) else "–"
            delta, verdict = "", ""
            if r.condition in {c.labels[b] for b in summary.baselines_in(regime)} and not (
                    len(cmp) and ((cmp["condition"] == r.condition) & (cmp["regime"] == regime)).any()):
                verdict = "baseline"
            elif len(cmp):
                hit = cmp[(cmp["condition"] == r.condition) & (cmp["regime"] == regime)]
                if len(hit):
                    hit = hit.iloc[0]
                    delta = fmt_ci(hit["diff"], hit["diff_ci_low"], hit["diff_ci_high"])
                    verdict = "significant (seeds)" if _true(hit["significant_seed"]) else "n.s."
            table.add_row(r.condition if first else "", f"{r.ok}/{r.runs}" if first else "", regime, value,
                          delta, verdict)
            first = False
    return table
