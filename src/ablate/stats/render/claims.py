"""The claims table, rendered (markdown and console). Computes nothing: every number is a column of
the engine's claims table (claims.csv) or its looks table (claims_looks.csv)."""

from __future__ import annotations

import math
import re

import pandas as pd
from rich.markup import escape
from rich.table import Table

from ablate.stats.claims.claim_types import label
from ablate.stats.maths.power import MAX_SEEDS
from ablate.stats.render.formatting import fmt, fmt_ci, fmt_p, md_table

SPENDING_NAMES = {"obrien_fleming": "O'Brien-Fleming", "pocock": "Pocock"}


def _seeds(r) -> str:
    if r["n_baseline"] is None or (isinstance(r["n_baseline"], float) and math.isnan(r["n_baseline"])):
        return str(int(r["n"])) if isinstance(r["n"], (int, float)) and not pd.isna(r["n"]) else "–"
    return f"{int(r['n'])} vs {int(r['n_baseline'])}"


def _look(r) -> str:
    if not r["look"]:
        return "–"
    return f"{r['look']} ({'unplanned' if str(r['planned']).startswith('no') else 'planned'})"


def plan_sentence(result) -> str:
    fam = result.table[result.table["family_size"] > 0]
    m = int(fam["family_size"].iloc[0]) if len(fam) else 0
    plan = result.plan
    procedure = getattr(result, "procedure", "")
    shared = (f"split equally (Bonferroni: {result.alpha / max(m, 1):.4g} each)" if not procedure else
              f"shared by {'the declared graph' if procedure == 'graph' else procedure} (Bretz et al. 2009: a "
              "replicated claim passes its level on; each claim's reason names the level it was decided at)")
    test = ("; a two-sample verdict also needs the exact randomization test over seed labels and arm SDs within "
            "3-fold (docs/stats.md, the level where the studies decide)"
            if getattr(result, "test", "welch") == "randomization" else "")
    head = (f"Family: the {m} declared claim(s) (descriptive rows are outside it); α={result.alpha:g} {shared}, "
            f"intervals at the matching level{test}. ")
    if plan.declared:
        return head + (f"Seed plan: looks at {'/'.join(map(str, plan.looks))} seeds per arm, "
                       f"{SPENDING_NAMES[plan.spending]} alpha spending (Lan-DeMets); each look's interval is at "
                       "its nominal level (column `confidence` in claims.csv)."
                       + (f" Futility (non-binding): no further look for a claim needing more than "
                          f"{plan.futility:g} x {plan.n_max} seeds per arm." if plan.futility is not None else ""))
    return head + ("No seed plan declared: the default plan (looks at "
                   f"{'/'.join(map(str, plan.looks))}) stands in, and every look is reported as unplanned.")


HEADERS = ["claim", "metric (regime)", "condition vs baseline", "claimed", "paper (1 seed)",
           "estimate [CI at the claim's level]", "seeds", "look", "verdict"]


def verdict_cell(r) -> str:
    """The verdict and why: the rule's reason, or the precondition that made it untestable."""
    shown = label(r["verdict"], r["excluded"] if isinstance(r["excluded"], str) else "")
    text = f"**{shown}**: {r['reason']}"
    if r["precondition"] and r["precondition_status"] in ("failed", "declared", "not measured"):
        text = f"**{shown}**: {r['precondition']}"
    if r["precondition"] and r["precondition_status"] == "undetermined":  # its interval holds the threshold
        text = f"**{shown}**: precondition undetermined: {r['precondition']}"
    if r["rate"]:
        text += f"; seeds meeting the success threshold: {r['rate']} vs {r['rate_baseline'] or '–'}"
    return text


def claim_cells(r) -> list[str]:
    """One claim's row, for report.md and findings.md alike: every cell a column of claims.csv."""
    paper = "–" if pd.isna(r["paper"]) else f"{r['paper']:+.3f}"
    return [f"**{r['id']}**: {r['claim']}", f"{r['metric']} (`{r['regime']}`)", f"{r['condition']} vs {r['baseline']}",
            r["claimed"], paper,
            estimate_cell(r), _seeds(r), _look(r), verdict_cell(r)]


def estimate_cell(r) -> str:
    """The estimate and its interval; a one-sample claim against a value other than 0 (its baseline cell
    `(value V)`) is shown on the metric's own scale first, then as the shift over V that the verdict reads."""
    shift = fmt_ci(r["estimate"], r["ci_low"], r["ci_high"])
    m = re.fullmatch(r"\((?:value|measured) ([^ ,)]+).*\)", str(r["baseline"]))
    bar = float(m.group(1)) if m else 0.0
    if not bar or pd.isna(r["estimate"]):
        return shift
    return f"{fmt_ci(r['estimate'] + bar, r['ci_low'] + bar, r['ci_high'] + bar)}; {shift} over {bar:g}"


def claims_tables(result) -> list[str]:
    """The claims as two tables: confirmatory (decided as registered before the data), then exploratory
    (no registration, registered late, or amended / added after the data: with what changed)."""
    t = result.table
    standing = t["standing"] if "standing" in t else pd.Series([""] * len(t), index=t.index)
    out = [getattr(result, "note", "") + "\n"] if getattr(result, "note", "") else []
    confirmatory = t[standing.isin(["confirmatory", "removed after registration", ""])]
    exploratory = t[~t.index.isin(confirmatory.index)]
    if len(confirmatory):
        if len(exploratory):
            out.append("**Confirmatory** (registered before the first run; the family and its α):\n")
        out.append(md_table(HEADERS, [claim_cells(r) for r in confirmatory.to_dict("records")]))
        removed = confirmatory[standing.loc[confirmatory.index] == "removed after registration"]
        if len(removed):
            out.append("\nRemoved from the preset after registration, still decided and counted in the family: "
                       + ", ".join(f"**{i}**" for i in removed["id"]) + ".")
        out.append("")
    if len(exploratory):
        out.append("**Exploratory** (not registered before the data: they describe, they do not confirm):\n")
        out.append(md_table(HEADERS + ["standing"], [
            claim_cells(r) + [r["standing"] + (f" ({r['amendment']})" if r.get("amendment") else "")]
            for r in exploratory.to_dict("records")]))
        out.append("")
    return out


def claims_markdown(result) -> list[str]:
    t = result.table
    out = ["## Claims\n", "Declared in the study preset; verdicts by the rules in docs/stats.md "
           "(replicated / not replicated / inconclusive / not testable, and what the interval excluded). The "
           "interval is Welch's over per-seed values (the training seed is the unit), at the claim's level. "
           + plan_sentence(result) + "\n"]
    out += claims_tables(result)
    for r in t.to_dict("records"):
        standing = r.get("standing")
        tag = f" ({standing})" if standing not in (None, "", "confirmatory") else ""
        line = f"- **{r['id']}**{tag} — {r['verdict']}: {r['reason']}."
        if r["precondition"] and r["precondition_status"] != "none":
            line += f" Precondition ({r['precondition_status']}): {r['precondition']}."
        if r["rate"]:
            line += f" Seeds meeting the success threshold: {r['condition']} {r['rate']}" + (
                f", {r['baseline']} {r['rate_baseline']}" if r["rate_baseline"] else "") + " (Clopper-Pearson)."
        if r["verdict"] == "inconclusive" and pd.notna(r["seeds_needed"]):
            nxt = f"; the plan's next look: {int(r['next_look'])} seeds per arm" if pd.notna(r["next_look"]) else \
                "; the plan has no further look"
            line += f" {_seeds_needed(r['seeds_needed'])} seeds per arm would decide it at this level{nxt}."
        out.append(line)
    looks = result.looks
    if len(looks):
        out.append("\n<details><summary>Every look (claims_looks.csv)</summary>\n")
        out.append(md_table(["claim", "look", "seeds", "planned", "information", "nominal α", "estimate [CI]",
                             "p", "verdict"],
                            [[r["id"], r["look"], _seeds(r), "yes" if r["planned"] else "no", fmt(r["fraction"]),
                              fmt(r["alpha_nominal"], 3), fmt_ci(r["estimate"], r["ci_low"], r["ci_high"]),
                              fmt_p(r["p_value"]), r["verdict"]] for r in looks.to_dict("records")]))
        out.append("\n</details>\n")
    return out


def _seeds_needed(n: float) -> str:
    """A seed count is a whole number; beyond power.MAX_SEEDS the search stops and says so."""
    return f"More than {MAX_SEEDS:,}" if math.isinf(n) else f"About {int(n)}"


def claims_console(result, console) -> None:
    table = Table(title="Claims (declared in the preset; recipe-level verdicts)")
    for col, justify in [("claim", "left"), ("estimate [CI]", "right"), ("seeds", "right"), ("look", "left"),
                         ("verdict", "left")]:
        table.add_column(col, justify=justify)
    colour = {"replicated": "green", "not replicated": "red", "inconclusive": "yellow", "not testable": "magenta"}
    for r in result.table.to_dict("records"):
        v = r["verdict"]
        standing = r.get("standing")
        tag = f" ({standing})" if standing not in (None, "", "confirmatory") else ""
        table.add_row(escape(r["id"]), fmt_ci(r["estimate"], r["ci_low"], r["ci_high"]), _seeds(r), _look(r),
                      f"[{colour.get(v, 'white')}]{escape(v)}[/]{escape(tag)}")
    console.print(table)
