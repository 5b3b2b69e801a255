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
from ablate.stats.formatting import fmt, fmt_ci, fmt_p, md_table, slug  # noqa: F401  (re-exported)
from ablate.stats.render_claims import claims_console, claims_markdown

HEADLINE = ["pass@1", "pass@16", "exact_pass@1", "coverage", "precision"]
CURVES_PER_FIGURE = 12
MAX_CONSOLE_WARNINGS = 20
MAX_CURVE_FIGURES = 3
PROFILES_PER_FIGURE = 6


def headline_metrics(a: Analysis, regime: str) -> list[str]:
    cond = a.summary[(a.summary["level"] == "condition") & (a.summary["regime"] == regime)]
    have = list(dict.fromkeys(cond["metric"]))
    ks = sorted((int(m.split("@")[1]) for m in have if re.fullmatch(r"pass@\d+", m)))
    wanted = list(a.settings.metrics) + ["pass@1"] + ([f"pass@{ks[-1]}"] if ks else []) + HEADLINE[2:]
    return [m for m in dict.fromkeys(wanted) if m in have]


# ---------------------------------------------------------------------------------------------
# figures


def make_figures(a: Analysis, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: list[tuple[str, str]] = []
    cond_rows = a.summary[a.summary["level"] == "condition"]
    order = [a.labels[c] for c in a.labels]
    for regime in a.regimes:
        rows = cond_rows[cond_rows["regime"] == regime]
        passk = rows[rows["metric"].str.fullmatch(r"pass@\d+")]
        if len(passk):
            fig, ax = plt.subplots(figsize=(6, 4))
            labels = [c for c in order if c in set(passk["condition"])]
            for i, label in enumerate(labels):
                r = passk[passk["condition"] == label].copy()
                r["k"] = r["metric"].str.split("@").str[1].astype(int)
                r = r.sort_values("k")
                jitter = 1.0 + 0.03 * (i - (len(labels) - 1) / 2)
                yerr = _yerr(r)
                ax.errorbar(r["k"] * jitter, r["value"], yerr=yerr, marker="o", capsize=3, label=label)
            ax.set_xscale("log", base=2)
            ks = sorted(set(passk["metric"].str.split("@").str[1].astype(int)))
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.set_xlabel("k")
            ax.set_ylabel("pass@k")
            ax.set_title(f"pass@k, regime {regime} (mean over seeds, {_pct(a)} CI)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            name = f"passk_{slug(regime)}.png"
            _save(fig, out / name, plt)
            figures.append((f"pass@k — {regime}", name))

        ops = rows[rows["metric"].str.fullmatch(r"by_operands/[^/]+/pass@1")]
        if not len(ops):
            ops = rows[rows["metric"].str.fullmatch(r"by_operands/[^/]+/exact_pass@1")]
        if len(ops):
            fig, ax = plt.subplots(figsize=(6, 4))
            ops = ops.copy()
            ops["ops"] = ops["metric"].str.split("/").str[1]
            groups = sorted(set(ops["ops"]), key=lambda x: (len(x), x))
            labels = [c for c in order if c in set(ops["condition"])]
            width = 0.8 / max(1, len(labels))
            for i, label in enumerate(labels):
                r = ops[ops["condition"] == label].set_index("ops").reindex(groups)
                x = np.arange(len(groups)) + (i - (len(labels) - 1) / 2) * width
                ax.bar(x, r["value"], width, yerr=_yerr(r), capsize=3, label=label)
            ax.set_xticks(np.arange(len(groups)), [f"{g} numbers" for g in groups])
            metric = ops["metric"].iloc[0].split("/")[-1]
            ax.set_ylabel(metric)
            ax.set_title(f"{metric} by operand count, regime {regime}")
            ax.grid(alpha=0.3, axis="y")
            ax.legend(fontsize=8)
            name = f"operands_{slug(regime)}.png"
            _save(fig, out / name, plt)
            figures.append((f"by operand count — {regime}", name))

        cmp = a.comparisons[a.comparisons["regime"] == regime] if len(a.comparisons) else a.comparisons
        cmp = cmp[np.isfinite(cmp["diff_ci_low"].astype(float))] if len(cmp) else cmp
        if len(cmp):
            fig, ax = plt.subplots(figsize=(6, 1.2 + 0.45 * len(cmp)))
            y = np.arange(len(cmp))[::-1]
            d = cmp["diff"].to_numpy(float)
            err = np.vstack([d - cmp["diff_ci_low"].to_numpy(float), cmp["diff_ci_high"].to_numpy(float) - d])
            ax.errorbar(d, y, xerr=np.clip(err, 0, None), fmt="o", capsize=3)
            ax.axvline(0, color="grey", lw=1)
            ax.set_yticks(y, [f"{c} · {m}" for c, m in zip(cmp["condition"], cmp["metric"])])
            bases = sorted(set(cmp["baseline"]))
            ax.set_xlabel(f"difference from baseline ({bases[0]})" if len(bases) == 1
                          else "difference from each family's baseline")
            ax.set_title(f"differences, regime {regime} ({_pct(a)} CI)")
            ax.grid(alpha=0.3, axis="x")
            name = f"differences_{slug(regime)}.png"
            _save(fig, out / name, plt)
            figures.append((f"differences from baseline — {regime}", name))

    for regime in a.regimes:
        found = _profile_figure(a, out, plt, regime, order)
        if found:
            figures.append(found)

    if len(a.curves):
        metrics = list(dict.fromkeys(a.curves["metric"]))
        held_out = [m for m in metrics if m.startswith("val/")]
        training = [m for m in metrics if not m.startswith("val/")]
        if held_out:
            figures.append(_curve_figure(a, out, plt, held_out[:CURVES_PER_FIGURE], "val_curves",
                                         "held-out evaluation during training", order))
        chunks = [training[i:i + CURVES_PER_FIGURE] for i in range(0, len(training), CURVES_PER_FIGURE)]
        for n, chunk in enumerate(chunks[:MAX_CURVE_FIGURES], 1):
            name = "curves" if len(chunks) == 1 else f"curves_{n}"
            title = "training curves" + ("" if len(chunks) == 1 else f" ({n})")
            figures.append(_curve_figure(a, out, plt, chunk, name, title, order))
    return figures


def _profile_figure(a: Analysis, out: Path, plt, regime: str, order: list[str]) -> tuple[str, str] | None:
    """rliable's performance profile per compared metric: the fraction of a condition's runs whose
    value is above tau, over tau, with a stratified-bootstrap band (runs resampled)."""
    from ablate.stats.analysis import rng_for
    from ablate.stats.intervals import performance_profile

    runs = a.summary[(a.summary["level"] == "run") & (a.summary["regime"] == regime)]
    metrics = [m for m in a.settings.metrics if (runs["metric"] == m).any()][:PROFILES_PER_FIGURE]
    key_of = {a.labels[c]: a.keys.get(c, a.labels[c]) for c in a.labels}
    if not metrics:
        return None
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
    for ax, metric in zip(axes.ravel(), metrics):
        sub = runs[runs["metric"] == metric]
        values = sub["value"].to_numpy(float)
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        pad = 0.05 * (hi - lo) if hi > lo else 0.01
        taus = np.linspace(lo - pad, hi + pad, 201)
        for label in [c for c in order if c in set(sub["condition"])]:
            v = sub[sub["condition"] == label]["value"].to_numpy(float)
            v = v[np.isfinite(v)]
            profile, low, high = performance_profile(
                v, taus, confidence=a.settings.confidence, n_resamples=min(a.settings.resamples, 2000),
                rng=rng_for(a.settings.seed, "profile", key_of[label], regime, metric))
            line, = ax.step(taus, profile, where="post", lw=1.3, label=f"{label} ({v.size})")
            if np.isfinite(low).any():
                ax.fill_between(taus, low, high, step="post", color=line.get_color(), alpha=0.15, lw=0)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("τ", fontsize=8)
        ax.set_ylabel("fraction of runs > τ", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(metrics):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"performance profiles, {regime}\n(runs per condition; {_pct(a)} bootstrap band)", fontsize=9)
    name = f"profile_{slug(regime)}.png"
    _save(fig, out / name, plt)
    return f"performance profiles — {regime}", name


def _curve_figure(a: Analysis, out: Path, plt, chunk: list[str], name: str, title: str,
                  order: list[str]) -> tuple[str, str]:
    cols = min(3, len(chunk))
    nrows = math.ceil(len(chunk) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.8 * nrows), squeeze=False)
    for ax, metric in zip(axes.ravel(), chunk):
        sub = a.curves[a.curves["metric"] == metric]
        for label in [c for c in order if c in set(sub["condition"])]:
            r = sub[sub["condition"] == label]
            sparse = metric.startswith("val/")
            line, = ax.plot(r["step"], r["mean"], lw=1.2, label=label, marker="o" if sparse else None, ms=3)
            ax.fill_between(r["step"], r["ci_low"], r["ci_high"], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(chunk):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"{title} (mean over seeds, {_pct(a)} t-interval band)", fontsize=10)
    _save(fig, out / f"{name}.png", plt)
    return title, f"{name}.png"


def _true(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and bool(x)


def _pct(a: Analysis) -> str:
    return f"{a.settings.confidence * 100:g}%"


def _yerr(r: pd.DataFrame) -> np.ndarray:
    v = r["value"].to_numpy(float)
    lo = r["ci_low"].to_numpy(float)
    hi = r["ci_high"].to_numpy(float)
    err = np.vstack([v - lo, hi - v])
    return np.nan_to_num(np.clip(err, 0, None))


def _save(fig, path: Path, plt) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# markdown


def run_warnings(a: Analysis) -> list[tuple[str, str, str]]:
    """(condition, run, text) for every warning a run wrote into its status.json."""
    return [(r.condition, r.run, w) for r in a.inventory.itertuples() if r.warnings
            for w in r.warnings.split(" | ")]


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
    if a.claims is not None:
        out.extend(claims_markdown(a.claims))

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
    out.extend(_warnings_section(a))

    cond_rows = a.summary[a.summary["level"] == "condition"]
    for regime in a.regimes:
        rows = cond_rows[cond_rows["regime"] == regime]
        metrics = headline_metrics(a, regime)
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
        out.append(md_table(["condition", "seeds"] + metrics, table))
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

    out.extend(_robust_section(a))

    if len(a.reach):
        out.append("\n## Steps to reach a threshold\n")
        cond = a.reach[a.reach["level"] == "condition"]
        if cond["metric"].str.startswith("val/").any():
            out.append("Training steps until the metric first reaches the threshold: held-out `val/` metrics as "
                       "evaluated every `eval.every` steps (not smoothed), other columns as a running mean of "
                       f"{s.smooth} logged values; mean over the seeds that reached it [{_pct(a)} t-interval].\n")
        else:
            out.append("Training steps until the running mean (window "
                       f"{s.smooth} logged values) of the metric first reaches the threshold; mean over the seeds "
                       f"that reached it [{_pct(a)} t-interval].\n")
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

    if figures:
        out.append("## Figures\n")
        for title, name in figures:
            out.append(f"### {title}\n\n![{title}]({name})\n")

    out.append("## Data problems\n")
    if a.problems:
        out.extend(f"- {p}" for p in a.problems)
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
    return "\n".join(out)


def _robust_section(a: Analysis) -> list[str]:
    if a.robust is None or not len(a.robust):
        return []
    out = ["\n## Robust aggregates across runs\n",
           "IQM: rliable's interquartile mean of the per-run values, the mean of the middle 50% of runs "
           "(a 25% trimmed mean: it cuts int(n/4) runs from each end, so with fewer than 4 runs it is the "
           f"mean); [{_pct(a)} CI: percentile of a stratified bootstrap over runs]. It is robust to one "
           "outlying seed where the mean is not. Performance profiles (figures): the fraction of each "
           "condition's runs above a threshold τ.\n"]
    out.append(md_table(["regime", "metric", "condition", "runs", "mean", "IQM [CI]", "trimmed per side"],
                        [[r.regime, r.metric, r.condition, r.n_runs, fmt(r.mean),
                          fmt_ci(r.iqm, r.iqm_ci_low, r.iqm_ci_high), r.trimmed_per_side]
                         for r in a.robust.itertuples()]))
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
    for name, df in tables.items():
        path = out / name
        df.to_csv(path, index=False)
        written[name] = path
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


def print_summary(a: Analysis, written: dict[str, Path], console=None) -> None:
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
