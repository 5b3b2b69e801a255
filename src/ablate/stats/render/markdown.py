"""report.md: its sections in reading order, each a function of the stage results it draws
(ablate.stats.stages.analysis); none computes a statistic."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ablate.rundir.metrics_csv import VAL
from ablate.stats.read.runs import machines
from ablate.stats.render.claims import claims_markdown
from ablate.stats.render.console import run_warnings
from ablate.stats.render.formatting import fmt, fmt_ci, fmt_p, md_table, pct, twins
from ablate.stats.stages.mechanisms import mechanisms_markdown

if TYPE_CHECKING:
    from ablate.stats.stages.analysis import Analysis
    from ablate.stats.stages.conditions import Conditions
    from ablate.stats.stages.settings import Settings
    from ablate.stats.stages.summary import Summary

HEADLINE = ["pass@1", "pass@16", "exact_pass@1", "coverage", "precision"]


def headline_metrics(summary: pd.DataFrame, compared: Sequence[str], regime: str) -> list[str]:
    """The Results table's columns: the compared metrics, pass@1 and the largest pass@k, then HEADLINE's
    others, those summary.csv (`summary`) has condition rows of in `regime`."""
    cond = summary[(summary["level"] == "condition") & (summary["regime"] == regime)]
    have = list(dict.fromkeys(cond["metric"]))
    ks = sorted((int(m.split("@")[1]) for m in have if re.fullmatch(r"pass@\d+", m)))
    wanted = list(compared) + ["pass@1"] + ([f"pass@{ks[-1]}"] if ks else []) + HEADLINE[2:]
    return [m for m in dict.fromkeys(wanted) if m in have]


def same_columns(summary: pd.DataFrame, regime: str, metrics: list[str]) -> dict[str, list[str]]:
    """Each headline metric kept -> the later ones equal to it in every run of summary.csv (formatting.twins)."""
    runs = summary[(summary["level"] == "run") & (summary["regime"] == regime)]
    return twins({m: tuple(runs[runs["metric"] == m].sort_values("run")[["run", "value"]].itertuples(index=False))
                  for m in metrics})


def _warnings_section(inventory: pd.DataFrame) -> list[str]:
    found = run_warnings(inventory)
    if not found:
        return []
    out = ["## Warnings\n",
           "Written by the runs themselves (status.json), e.g. a curriculum that never engaged: a "
           "condition whose mechanism did not run says nothing about that mechanism.\n"]
    for cond in dict.fromkeys(c for c, _, _ in found):
        out.append(f"- **{cond}**")
        out.extend(f"  - `{run}`: {text}" for c, run, text in found if c == cond)
    out.append("")
    return out


def render_markdown(a: Analysis, figures: list[tuple[str, str]], command: str = "") -> str:
    """report.md. `figures`: (title, file name) of each figure written beside it; `command`: the
    command line that made it, shown in the header."""
    c, s = a.conditions, a.conditions.settings
    out = _header(c, command) + (claims_markdown(a.claims) if a.claims is not None else [])
    out += mechanisms_markdown(a.mechanisms)
    out += _runs_section(c) + _warnings_section(c.inventory) + _results_sections(c, a.summary)
    out += _comparisons_section(a.comparisons.table, a.notes, s)
    out += _robust_section(a.summary.robust, s.confidence) + _reach_section(a.curves.reach, s.smooth, s.confidence)
    out += _figures_section(figures) + _closing_sections(a.problems)
    return "\n".join(out)


def _header(c: Conditions, command: str) -> list[str]:
    s = c.settings
    out: list[str] = []
    out.append(f"# Stats report — {c.sweep.name}\n")
    if c.study is not None:
        out.append(f"Study: **{c.study.name}**" + (f" — {c.study.question}" if c.study.question else "") + "  ")
    out.append("Sweep: " + ", ".join(f"`{p}`" for p in c.sweep.roots) + "  ")
    if command:
        out.append(f"Command: `{command}`  ")
    out.append(f"Settings: {s.resamples} bootstrap resamples, {pct(s.confidence)} intervals, α={s.alpha:g}, "
               f"seed {s.seed}.  ")
    out += _machines_line(c)
    if c.common:
        out.append("Overrides shared by every condition: " + ", ".join(f"`{o}`" for o in c.common) + "  ")
    named = [(c.labels[k], c.keys[k]) for k in c.labels if c.labels[k] != c.keys.get(k, c.labels[k])]
    if named:
        out.append("Named conditions (study.names / --name): "
                   + "; ".join(f"**{label}** = `{key}`" for label, key in named) + "  ")
    if c.families:
        out.append("Baselines (the study's; each condition is compared with the baseline of the first "
                   "family that matches it):\n")
        for f in c.families:
            base = f"**{f['baseline']}**" if f["baseline"] else "no matching condition: not compared"
            if f["baseline"] and not f["usable"]:
                base += " (no usable runs: not compared)"
            rule = " (global rule: " + c.baseline_rule + ")" if f["family"] == "any other condition" else ""
            out.append(f"- {f['family']} → {base}{rule}")
    elif c.baseline is not None:
        out.append(f"Baseline: **{c.labels[c.baseline]}** ({c.baseline_rule}).")
    else:
        out.append("Baseline: none (no condition has usable runs).")
    out.append("")
    return out


def _machines_line(c: Conditions) -> list[str]:
    """Where the seeds ran, when more than one machine ran them (one machine says nothing new)."""
    by = machines(c.sweep.runs)
    if len(by) < 2:
        return []
    def seeds(runs) -> str:
        return ", ".join(sorted({str(r.seed) for r in runs}, key=lambda s: (len(s), s)))
    return ["Machines (pooled as seeds of one recipe: where a run ran is not its condition): "
            + "; ".join(f"`{m}`: {len(runs)} runs (seeds {seeds(runs)})" for m, runs in by.items()) + "  "]


def _runs_section(c: Conditions) -> list[str]:
    out: list[str] = []
    out.append("## Runs\n")
    out.append(md_table(["condition", "runs", "ok", "failed", "running", "missing", "seeds used"],
                        [[r.condition, r.runs, r.ok, r.failed, r.running, r.missing, r.seeds_ok or "–"]
                         for r in c.table.itertuples()]))
    out.append("")
    left_out = c.inventory[c.inventory["outcome"] != "ok"]
    if len(left_out):
        out.append(f"**{len(left_out)} run(s) not included** (never dropped silently):\n")
        out.append(md_table(["run", "condition", "seed", "outcome", "reason"],
                            [[f"`{r.path or r.run}`" if (r.path or r.run) else "(no directory)", r.condition,
                              r.seed if r.seed is not None else "–", r.outcome, r.reason]
                             for r in left_out.itertuples()]))
        out.append("")
    noted = c.inventory[(c.inventory["outcome"] == "ok") & (c.inventory["reason"] != "")]
    for r in noted.itertuples():
        out.append(f"- `{r.run}`: {r.reason}")
    if len(noted):
        out.append("")

    return out


def _results_sections(c: Conditions, summary: Summary) -> list[str]:
    s = c.settings
    out: list[str] = []
    cond_rows = summary.table[summary.table["level"] == "condition"]
    for regime in c.regimes:
        rows = cond_rows[cond_rows["regime"] == regime]
        columns = same_columns(summary.table, regime, headline_metrics(summary.table, s.metrics, regime))
        metrics = list(columns)
        base_labels = {c.labels[b] for b in summary.baselines_in(regime)}
        out.append(f"## Results — regime `{regime}`\n")
        out.append(f"Mean over seeds [{pct(s.confidence)} CI: t-interval over seeds; one seed: bootstrap over "
                   "prompts]. All metrics, per-run values, Wilson intervals: `summary.csv`.\n")
        table = []
        for label in [c.labels[k] for k in c.labels]:
            r = rows[rows["condition"] == label]
            if not len(r):
                continue
            n_seeds = int(r["n_seeds"].max())
            cells = [label + (" (baseline)" if label in base_labels else ""), n_seeds]
            for m in metrics:
                x = r[r["metric"] == m]
                cells.append(fmt_ci(*x[["value", "ci_low", "ci_high"]].iloc[0]) if len(x) else "–")
            table.append(cells)
        out.append(md_table(["condition", "seeds"] + [" = ".join([m, *columns[m]]) for m in metrics], table))
        out.append("")
        runs = summary.table[(summary.table["level"] == "run") & (summary.table["regime"] == regime)
                             & (summary.table["metric"].isin(s.metrics))]
        if len(runs):
            out.append(f"<details><summary>Per-run values of {', '.join(s.metrics)}</summary>\n")
            out.append(md_table(
                ["run", "condition", "seed", "metric", "value [bootstrap over prompts]", "Wilson (samples)",
                 "summary.json"],
                [[f"`{r.run}`", r.condition, r.seed, r.metric, fmt_ci(r.value, r.ci_low, r.ci_high),
                  f"[{fmt(r.wilson_low)}, {fmt(r.wilson_high)}]" if np.isfinite(r.wilson_low) else "–",
                  fmt(r.reported, 4)] for r in runs.itertuples()]))
            out.append("\n</details>\n\n")

    return out


def _comparisons_section(cmp: pd.DataFrame, notes: list[str], s: Settings) -> list[str]:
    """comparisons.csv (`cmp`), then every stage's notes (Analysis.notes) on what was not compared."""
    out: list[str] = []
    out.append("## Comparisons with the baseline\n")
    if not len(cmp):
        out.append("No comparisons." + (" " + " ".join(notes) if notes else "") + "\n")
    else:
        out.append(
            f"Δ = condition − baseline, mean over seeds [{pct(s.confidence)} CI: Welch's t-interval over per-seed "
            "values, the same test as p seeds]. Paired (model-level, decides nothing): per-prompt values averaged over "
            "seeds, matched by prompt id, p from a permutation test that swaps the two conditions within "
            "prompts; it speaks about these trained models, not the recipe. Seeds: Welch t-test on per-seed values. "
            "P(improve): P(X > Y) + ½P(X = Y) over seed pairs [bootstrap CI]. p-values are "
            f"Holm-corrected across the {len(cmp)} comparison(s) in this table, per test.\n")
        out.append(md_table(
            ["regime", "metric", "condition", "Δ [CI]", "paired Δ [CI] (prompts)", "p paired (Holm)",
             "p seeds (Holm)", "P(improve) [CI]", "verdict"],
            [[r.regime, r.metric, r.condition, fmt_ci(r.diff, r.diff_ci_low, r.diff_ci_high),
              (fmt_ci(r.paired_diff, r.paired_ci_low, r.paired_ci_high) + f" ({r.n_shared_prompts})")
              if np.isfinite(r.paired_diff) else "–",
              f"{fmt_p(r.p_paired)} ({fmt_p(r.p_paired_holm)})", f"{fmt_p(r.p_seed)} ({fmt_p(r.p_seed_holm)})",
              fmt_ci(r.poi, r.poi_ci_low, r.poi_ci_high), r.verdict] for r in cmp.itertuples()]))
        out.append("")
        for r in cmp.itertuples():
            sentence = (f"- **{r.condition}** vs **{r.baseline}** on {r.metric} (`{r.regime}`): "
                        f"{fmt(r.mean)} vs {fmt(r.mean_baseline)}, Δ {fmt_ci(r.diff, r.diff_ci_low, r.diff_ci_high)}"
                        f" — {r.verdict}.")
            if r.note:
                sentence += f" _{r.note}._"
            out.append(sentence)
            if r.power_note:
                out.append(f"  - {r.power_note}")
        out.append("")
        if (cmp["power_note"] != "").any():
            out.append(f"_inconclusive_ lines (comparisons not significant across seeds): the smallest difference "
                       "the seed-level test detects with 80% power at the current seeds, and the seeds per "
                       f"condition that would detect {fmt(s.effect)}; at α={s.alpha:g}/{len(cmp)} (Holm's first "
                       "step), from the seeds' own variance.\n")
    for note in notes:
        if len(cmp):
            out.append(f"- {note}")

    return out


def _reach_section(reach: pd.DataFrame, smooth: int, confidence: float) -> list[str]:
    out: list[str] = []
    if len(reach):
        out.append("\n## Steps to reach a threshold\n")
        cond = reach[reach["level"] == "condition"]
        if cond["metric"].str.startswith(VAL).any():
            out.append("Training steps until the metric first reaches the threshold: held-out `val/` metrics as "
                       "evaluated every `eval.every` steps (not smoothed), other columns as a running mean of "
                       f"{smooth} logged values; the restricted mean over every seed (one that never reaches it counts "
                       f"as its last step: censored, not dropped) [{pct(confidence)} t-interval].\n")
        else:
            out.append("Training steps until the running mean (window "
                       f"{smooth} logged values) of the metric first reaches the threshold; the restricted mean over "
                       "every seed (one that never reaches it counts as its last step) "
                       f"[{pct(confidence)} t-interval].\n")
        for metric, caveat in dict(zip(cond["metric"], cond["caveat"])).items():
            if caveat:
                out.append(f"**`{metric}`: {caveat}.**\n")
        timed = bool(np.isfinite(cond["time_s"].astype(float)).any())
        out.append(md_table(
            ["condition", "metric", "threshold", "reached", "steps [CI]"] + (["time (s)"] if timed else [])
            + ["threshold from"],
            [[r.condition, r.metric, f"{r.op} {fmt(r.threshold, 4)}", f"{r.reached}/{r.runs}",
              fmt_ci(r.step, r.step_ci_low, r.step_ci_high, 1)] + ([fmt(r.time_s, 1)] if timed else [])
             + [r.source] for r in cond.itertuples()]))
        out.append("")

    return out


def _figures_section(figures: list[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    if figures:
        out.append("## Figures\n")
        for title, name in figures:
            out.append(f"### {title}\n\n![{title}]({name})\n")

    return out


def _closing_sections(problems: list[str]) -> list[str]:
    out: list[str] = []
    out.append("## Data problems\n")
    if problems:
        out.extend(f"- {p}" for p in problems)
    else:
        out.append("None found.")
    out.append("")
    out.append("## How to read this\n")
    out.append(
        "- Condition intervals are t-intervals over seeds: the training seed is the unit of replication, and "
        "each seed's value already averages the shared test prompts. With few seeds they are wide, and "
        "honest about it. This table describes; a study's verdicts are its Claims table.\n"
        "- Per-run intervals (summary.csv, `level=run`) resample prompts only (scipy BCa, percentile "
        "where BCa is degenerate). Wilson intervals treat every sample as independent and are "
        "narrower than the prompt bootstrap; prefer the bootstrap.\n"
        "- 'Not significant' means the data do not show a difference at this α after Holm correction; "
        "it is not evidence that the conditions are equal.\n"
        "- See docs/stats.md for definitions.\n")
    return out


def _robust_section(robust: pd.DataFrame | None, confidence: float) -> list[str]:
    if robust is None or not len(robust):
        return []
    out = ["\n## Robust aggregates across runs\n",
           "IQM: rliable's interquartile mean of the per-run values, the mean of the middle 50% of runs "
           "(a 25% trimmed mean: it cuts int(n/4) runs from each end, so with fewer than 4 runs it is the "
           f"mean); [{pct(confidence)} CI: percentile of a stratified bootstrap over runs]. It is robust to one "
           "outlying seed where the mean is not. Performance profiles (figures): the fraction of each "
           "condition's runs above a threshold τ.\n"]
    out.append(md_table(["regime", "metric", "condition", "runs", "mean", "IQM [CI]", "trimmed per side"],
                        [[r.regime, r.metric, r.condition, r.n_runs, fmt(r.mean),
                          fmt_ci(r.iqm, r.iqm_ci_low, r.iqm_ci_high), r.trimmed_per_side]
                         for r in robust.itertuples()]))
    out.append("")
    return out
