"""The terminal summary of a report: the claims first, then each condition's headline metric."""

from __future__ import annotations

import math
from pathlib import Path

from ablate.stats.figures import pct as _pct
from ablate.stats.formatting import fmt_ci
from ablate.stats.render_claims import claims_console

MAX_CONSOLE_WARNINGS = 20


def _true(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and bool(x)


def run_warnings(a) -> list[tuple[str, str, str]]:
    """(condition, run, text) for every warning a run wrote into its status.json."""
    return [(r.condition, r.run, w) for r in a.inventory.itertuples() if r.warnings
            for w in r.warnings.split(" | ")]


def print_summary(a, written: dict[str, Path], console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    metric = a.settings.metrics[0]
    if a.study is not None:
        console.print(escape(f"Study {a.study.name}" + (f": {a.study.question}" if a.study.question else "")),
                      highlight=False, soft_wrap=True)
    if a.claims is not None:
        claims_console(a.claims, console)
    table = Table(title=f"{a.sweep.name}: {metric}, mean over seeds [{_pct(a)} CI]")
    for col, justify in [("condition", "left"), ("runs ok", "right"), ("regime", "left"), (metric, "right"),
                         ("Δ vs baseline", "right"), ("", "left")]:
        table.add_column(col, justify=justify)
    rows = a.summary[(a.summary["level"] == "condition") & (a.summary["metric"] == metric)]
    cmp = a.comparisons[a.comparisons["metric"] == metric] if len(a.comparisons) else a.comparisons
    for r in a.conditions.itertuples():
        first = True
        for regime in a.regimes or [""]:
            x = rows[(rows["condition"] == r.condition) & (rows["regime"] == regime)]
            value = fmt_ci(*x[["value", "ci_low", "ci_high"]].iloc[0]) if len(x) else "–"
            delta, verdict = "", ""
            if r.condition in {a.labels[b] for b in a.baselines_in(regime)} and not (
                    len(cmp) and ((cmp["condition"] == r.condition) & (cmp["regime"] == regime)).any()):
                verdict = "baseline"
            elif len(cmp):
                c = cmp[(cmp["condition"] == r.condition) & (cmp["regime"] == regime)]
                if len(c):
                    c = c.iloc[0]
                    delta = fmt_ci(c["diff"], c["diff_ci_low"], c["diff_ci_high"])
                    verdict = "significant (seeds)" if _true(c["significant_seed"]) else "n.s."
            table.add_row(r.condition if first else "", f"{r.ok}/{r.runs}" if first else "", regime, value,
                          delta, verdict)
            first = False
    console.print(table)
    if len(a.comparisons):
        console.print(f"significant: Welch's test on per-seed values at α={a.settings.alpha:g} after Holm "
                      "correction over this table (descriptive; the claims table decides)")
    left_out = int((a.inventory["outcome"] != "ok").sum()) if len(a.inventory) else 0
    if left_out:
        console.print(f"[yellow]{left_out} run(s) not included (failed, running or missing); "
                      "listed in the report.[/yellow]")
    found = run_warnings(a)
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
