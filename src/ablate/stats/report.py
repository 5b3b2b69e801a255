"""Writing an `Analysis`: report.md / report.json, csv tables, PNG figures, a terminal summary."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ablate.stats.analysis import Analysis
from ablate.stats.archive import RUNS_FILE, root_of, write_runs
from ablate.stats.formatting import fmt, fmt_ci, fmt_p, md_table, slug, twins  # noqa: F401  (re-exported)
from ablate.stats.figures import make_figures, pct as _pct
from ablate.stats.mechanisms import declared_mechanisms, mechanisms_markdown
from ablate.stats.render_claims import claims_markdown
from ablate.stats.render_console import print_summary, run_warnings  # noqa: F401  (print_summary re-exported)

HEADLINE = ["pass@1", "pass@16", "exact_pass@1", "coverage", "precision"]


def headline_metrics(a: Analysis, regime: str) -> list[str]:
    cond = a.summary[(a.summary["level"] == "condition") & (a.summary["regime"] == regime)]
    have = list(dict.fromkeys(cond["metric"]))
    ks = sorted((int(m.split("@")[1]) for m in have if re.fullmatch(r"pass@\d+", m)))
    wanted = list(a.settings.metrics) + ["pass@1"] + ([f"pass@{ks[-1]}"] if ks else []) + HEADLINE[2:]
    return [m for m in dict.fromkeys(wanted) if m in have]


def same_columns(a: Analysis, regime: str, metrics: list[str]) -> dict[str, list[str]]:
    """Each headline metric kept -> the later ones equal to it in every run (formatting.twins)."""
    runs = a.summary[(a.summary["level"] == "run") & (a.summary["regime"] == regime)]
    return twins({m: tuple(runs[runs["metric"] == m].sort_values("run")[["run", "value"]].itertuples(index=False))
                  for m in metrics})


# ---------------------------------------------------------------------------------------------
# figures


# ---------------------------------------------------------------------------------------------
# markdown


def _warnings_section(a: Analysis) -> list[str]:
    found = run_warnings(a)
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
    """report.md: sections in reading order, each a function of the analysis' tables."""
    out = _header(a, command) + (claims_markdown(a.claims) if a.claims is not None else [])
    out += mechanisms_markdown(a.mechanisms, declared_mechanisms(a.study.block if a.study else None, []))
    out += _runs_section(a) + _warnings_section(a) + _results_sections(a) + _comparisons_section(a)
    out += _robust_section(a.robust, _pct(a)) + _reach_section(a.reach, a.settings.smooth, _pct(a))
    out += _figures_section(figures) + _closing_sections(a.problems)
    return "\n".join(out)


def _header(a: Analysis, command: str) -> list[str]:
    s = a.settings
    out: list[str] = []
    out.append(f"# Stats report — {a.sweep.name}\n")
    if a.study is not None:
        out.append(f"Study: **{a.study.name}**" + (f" — {a.study.question}" if a.study.question else "") + "  ")
    out.append("Sweep: " + ", ".join(f"`{p}`" for p in a.sweep.roots) + "  ")
    if command:
        out.append(f"Command: `{command}`  ")
    out.append(f"Settings: {s.resamples} bootstrap resamples, {_pct(a)} intervals, α={s.alpha:g}, "
               f"seed {s.seed}.  ")
    if a.common:
        out.append("Overrides shared by every condition: " + ", ".join(f"`{c}`" for c in a.common) + "  ")
    named = [(a.labels[c], a.keys[c]) for c in a.labels if a.labels[c] != a.keys.get(c, a.labels[c])]
    if named:
        out.append("Named conditions (study.names / --name): "
                   + "; ".join(f"**{label}** = `{key}`" for label, key in named) + "  ")
    if a.families:
        out.append("Baselines (the study's; each condition is compared with the baseline of the first "
                   "family that matches it):\n")
        for f in a.families:
            base = f"**{f['baseline']}**" if f["baseline"] else "no matching condition: not compared"
            if f["baseline"] and not f["usable"]:
                base += " (no usable runs: not compared)"
            rule = " (global rule: " + a.baseline_rule + ")" if f["family"] == "any other condition" else ""
            out.append(f"- {f['family']} → {base}{rule}")
    elif a.baseline is not None:
        out.append(f"Baseline: **{a.labels[a.baseline]}** ({a.baseline_rule}).")
    else:
        out.append("Baseline: none (no condition has usable runs).")
    out.append("")
    return out


def _runs_section(a: Analysis) -> list[str]:
    out: list[str] = []
    out.append("## Runs\n")
    c = a.conditions
    out.append(md_table(["condition", "runs", "ok", "failed", "running", "missing", "seeds used"],
                        [[r.condition, r.runs, r.ok, r.failed, r.running, r.missing, r.seeds_ok or "–"]
                         for r in c.itertuples()]))
    out.append("")
    left_out = a.inventory[a.inventory["outcome"] != "ok"]
    if len(left_out):
        out.append(f"**{len(left_out)} run(s) not included** (never dropped silently):\n")
        out.append(md_table(["run", "condition", "seed", "outcome", "reason"],
                            [[f"`{r.path or r.run}`" if (r.path or r.run) else "(no directory)", r.condition,
                              r.seed if r.seed is not None else "–", r.outcome, r.reason]
                             for r in left_out.itertuples()]))
        out.append("")
    noted = a.inventory[(a.inventory["outcome"] == "ok") & (a.inventory["reason"] != "")]
    for r in noted.itertuples():
        out.append(f"- `{r.run}`: {r.reason}")
    if len(noted):
        out.append("")

    return out


def _results_sections(a: Analysis) -> list[str]:
    s = a.settings
    out: list[str] = []
    cond_rows = a.summary[a.summary["level"] == "condition"]
    for regime in a.regimes:
        rows = cond_rows[cond_rows["regime"] == regime]
        columns = same_columns(a, regime, headline_metrics(a, regime))
        metrics = list(columns)
        base_labels = {a.labels[b] for b in a.baselines_in(regime)}
        out.append(f"## Results — regime `{regime}`\n")
        out.append(f"Mean over seeds [{_pct(a)} CI: t-interval over seeds; one seed: bootstrap over prompts]. "
                   "All metrics, per-run values, Wilson intervals: `summary.csv`.\n")
        table = []
        for label in [a.labels[k] for k in a.labels]:
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
        runs = a.summary[(a.summary["level"] == "run") & (a.summary["regime"] == regime)
                         & (a.summary["metric"].isin(s.metrics))]
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


def _comparisons_section(a: Analysis) -> list[str]:
    s = a.settings
    out: list[str] = []
    out.append("## Comparisons with the baseline\n")
    cmp = a.comparisons
    if not len(cmp):
        out.append("No comparisons." + (" " + " ".join(a.notes) if a.notes else "") + "\n")
    else:
        out.append(
            f"Δ = condition − baseline, mean over seeds [{_pct(a)} CI: Welch's t-interval over per-seed values, "
            "the same test as p seeds]. Paired (model-level, decides nothing): per-prompt values averaged over "
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
    for note in a.notes:
        if len(cmp):
            out.append(f"- {note}")

    return out


def _reach_section(reach: pd.DataFrame, smooth: int, pct: str) -> list[str]:
    out: list[str] = []
    if len(reach):
        out.append("\n## Steps to reach a threshold\n")
        cond = reach[reach["level"] == "condition"]
        if cond["metric"].str.startswith("val/").any():
            out.append("Training steps until the metric first reaches the threshold: held-out `val/` metrics as "
                       "evaluated every `eval.every` steps (not smoothed), other columns as a running mean of "
                       f"{smooth} logged values; the restricted mean over every seed (one that never reaches it counts "
                       f"as its last step: censored, not dropped) [{pct} t-interval].\n")
        else:
            out.append("Training steps until the running mean (window "
                       f"{smooth} logged values) of the metric first reaches the threshold; the restricted mean over "
                       f"every seed (one that never reaches it counts as its last step) [{pct} t-interval].\n")
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


def _robust_section(robust: pd.DataFrame | None, pct: str) -> list[str]:
    if robust is None or not len(robust):
        return []
    out = ["\n## Robust aggregates across runs\n",
           "IQM: rliable's interquartile mean of the per-run values, the mean of the middle 50% of runs "
           "(a 25% trimmed mean: it cuts int(n/4) runs from each end, so with fewer than 4 runs it is the "
           f"mean); [{pct} CI: percentile of a stratified bootstrap over runs]. It is robust to one "
           "outlying seed where the mean is not. Performance profiles (figures): the fraction of each "
           "condition's runs above a threshold τ.\n"]
    out.append(md_table(["regime", "metric", "condition", "runs", "mean", "IQM [CI]", "trimmed per side"],
                        [[r.regime, r.metric, r.condition, r.n_runs, fmt(r.mean),
                          fmt_ci(r.iqm, r.iqm_ci_low, r.iqm_ci_high), r.trimmed_per_side]
                         for r in robust.itertuples()]))
    out.append("")
    return out


# ---------------------------------------------------------------------------------------------
# csv and json


def _records(df: pd.DataFrame) -> list[dict]:
    return [_clean(r) for r in df.to_dict("records")]


def _clean(x):
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if x is pd.NA:
        return None
    return x


PROMPT_COLUMNS = ["run", "seed", "condition", "regime", "id", "n_numbers", "n", "n_correct", "n_answered"]


def per_prompt_table(a: Analysis) -> pd.DataFrame:
    """Every completed run's per-prompt counts in every regime (no completions): run, seed, condition,
    regime, prompt id, operand count, samples, correct, answered, and one column per verdict."""
    parts = []
    for run in a.sweep.runs:
        if not run.ok:
            continue
        for regime, ev in run.evals.items():
            if not ev.usable:
                continue
            cols = dict(ev.prompts.cols)  # every count the run has: the archive reads them back (ablate.stats.archive)
            frame = pd.DataFrame({k: np.asarray(v, dtype=np.int64) if np.all(np.mod(v, 1) == 0) else v
                                  for k, v in cols.items()})
            frame.insert(0, "id", ev.prompts.ids)
            frame.insert(0, "regime", regime)
            frame.insert(0, "condition", a.labels.get(run.condition, run.label))
            frame.insert(0, "seed", run.seed)
            frame.insert(0, "run", run.rel)
            parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=PROMPT_COLUMNS)
    table = pd.concat(parts, ignore_index=True)
    return table.rename(columns=lambda c: c.replace("verdict/", "verdict_"))


def report_json(a: Analysis, figures: list[tuple[str, str]], command: str = "") -> dict:
    return _clean({
        "sweep": {"name": a.sweep.name, "roots": [str(p) for p in a.sweep.roots]},
        "command": command,
        "settings": {"resamples": a.settings.resamples, "confidence": a.settings.confidence,
                     "alpha": a.settings.alpha, "seed": a.settings.seed, "metrics": list(a.settings.metrics),
                     "smooth": a.settings.smooth, "effect": a.settings.effect},
        "baseline": None if a.baseline is None else {"condition": a.labels[a.baseline],
                                                     "overrides": list(a.baseline), "rule": a.baseline_rule},
        "common_overrides": a.common,
        "regimes": a.regimes,
        "conditions": _records(a.conditions),
        "runs": _records(a.inventory),
        "summary": _records(a.summary),
        "comparisons": _records(a.comparisons),
        "reach": _records(a.reach),
        "curves": _records(a.curves),
        "figures": [{"title": t, "file": f} for t, f in figures],
        "problems": a.problems,
        "notes": a.notes,
        **({} if a.study is None else {"study": {
            "name": a.study.name, "question": a.study.question, "metrics": list(a.study.metrics),
            "effect": a.study.effect, "baselines": a.families}}),
        **({} if a.power is None else {"power": _records(a.power)}),
        **({} if a.robust is None else {"robust": _records(a.robust)}),
        **({} if a.claims is None else {"claims": _records(a.claims.table), "claims_looks": _records(a.claims.looks)}),
    })


def write_report(a: Analysis, out: Path, formats: Iterable[str] = ("md",), plots: bool = True,
                 command: str = "") -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    tables = {"summary.csv": a.summary, "comparisons.csv": a.comparisons, "runs.csv": a.inventory,
              "curves.csv": a.curves, "reach.csv": a.reach}
    if a.power is not None:
        tables["power.csv"] = a.power
    if a.robust is not None:
        tables["robust.csv"] = a.robust
    if a.claims is not None:
        tables["claims.csv"] = a.claims.table
        tables["claims_looks.csv"] = a.claims.looks
    if a.mechanisms is not None:
        tables["mechanisms.csv"] = a.mechanisms
    for name, df in tables.items():
        path = out / name
        df.to_csv(path, index=False)
        written[name] = path
    prompts = per_prompt_table(a)
    if len(prompts):  # compact, so any later method can re-analyse without the run directories
        prompts.to_csv(out / "prompts.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
        written["prompts.csv.gz"] = out / "prompts.csv.gz"
        written[RUNS_FILE] = write_runs([(run, root_of(run.path, a.sweep.roots)) for run in a.sweep.runs], out)
    figures = make_figures(a, out) if plots else []
    for _, name in figures:
        written[name] = out / name
    formats = set(formats)
    if "md" in formats:
        path = out / "report.md"
        path.write_text(render_markdown(a, figures, command), encoding="utf-8")
        written["report.md"] = path
    if "json" in formats:
        path = out / "report.json"
        path.write_text(json.dumps(report_json(a, figures, command), indent=1, allow_nan=False),
                        encoding="utf-8")
        written["report.json"] = path
    return written
