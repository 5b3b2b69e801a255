"""The summary stage: each condition's numbers in each eval regime. Per run, a bootstrap over prompts;
per condition, a t-interval over seeds (the unit of replication); numbers only summary.json has, as
reported; rliable's robust aggregates and performance profiles over runs. `summarize` returns them as
`Summary`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ablate.stats.maths.intervals import nanmean, ratio_bootstrap_ci, rng_for, t_interval, wilson_interval
from ablate.stats.read.runs import Run
from ablate.stats.stages.robust import profile_table, robust_table
from ablate.stats.stages.settings import Settings
from ablate.stats.values.blocks import _NOT_SUMMARY_METRICS, AGREEMENT_TOL, MetricBlock, flatten_summary, metric_sort_key, \
    prompt_metrics

if TYPE_CHECKING:
    from ablate.stats.stages.conditions import Conditions

# metrics that are rates or shares in [0, 1] (their condition intervals are clipped to it)
_RATE = re.compile(r"(^|/)(pass[@^]\d+|exact_pass@1|coverage|precision|mixed_fraction|best_of_n|verdict_rate/.*"
                   r"|tool/calc_emission_rate)$")
SUMMARY_COLUMNS = [
    "level", "regime", "condition", "seed", "run", "metric", "value", "sd_seeds", "n_seeds",
    "ci_low", "ci_high", "ci_method", "wilson_low", "wilson_high", "reported", "n_prompts", "n_samples",
]


@dataclass
class Group:
    """One condition in one eval regime: the usable runs and their statistics."""

    condition: tuple[str, ...]
    regime: str
    runs: list[Run]
    blocks: list[MetricBlock]
    names: list[str]
    run_values: np.ndarray  # (S, M)
    reported: dict[str, np.ndarray] = field(default_factory=dict)  # summary-only metrics, (S,)

    def values(self, name: str) -> np.ndarray | None:
        """Per-run values of a metric (recomputed, else the runs' summary-only numbers), finite ones only."""
        v = self.run_values[:, self.names.index(name)] if name in self.names else self.reported.get(name)
        return None if v is None else v[np.isfinite(v)]


@dataclass(frozen=True)
class Summary:
    """Each condition's numbers per regime, and which conditions are some condition's baseline there."""

    groups: dict[tuple[tuple[str, ...], str], Group]  # (condition, regime) -> its runs and per-run values
    table: pd.DataFrame  # summary.csv (SUMMARY_COLUMNS): level run and condition rows, every metric
    robust: pd.DataFrame  # robust.csv (robust.ROBUST_COLUMNS): IQM over runs of the compared metrics
    profiles: pd.DataFrame  # the compared metrics' performance profiles (robust.PROFILE_COLUMNS)
    baselines: dict[str, set]  # regime -> the conditions some condition evaluated in it is compared with
    problems: list[str]

    def baselines_in(self, regime: str) -> set:
        return self.baselines.get(regime, set())


def summarize(c: Conditions) -> Summary:
    """Every usable condition in every regime it was evaluated in."""
    problems: list[str] = []
    groups: dict[tuple[tuple[str, ...], str], Group] = {}
    rows: list[dict] = []
    for regime in c.regimes:
        for cond in c.usable_conditions:
            runs = [r for r in c.usable[cond] if regime in r.evals and r.evals[regime].usable]
            if not runs:
                continue
            group, group_rows = _analyze_group(cond, regime, runs, c.labels[cond], c.settings, problems)
            groups[(cond, regime)] = group
            rows.extend(group_rows)
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    baselines = {regime: {b for (cond, r), b in c.baseline_for.items()
                          if r == regime and b is not None and (cond, r) in groups} for regime in c.regimes}
    return Summary(groups=groups, table=table, robust=robust_table(groups, c.labels, c.regimes, c.settings),
                   profiles=profile_table(table, c.labels, c.keys, c.regimes, c.settings), baselines=baselines,
                   problems=problems)


def _analyze_group(cond, regime, runs, label, settings: Settings, problems: list[str]):
    """One condition in one regime: per-run rows (a bootstrap over prompts each), condition rows (a
    t-interval over seeds), and the runs' summary-only numbers."""
    names, blocks = _common_blocks(runs, regime, label, problems)
    rows: list[dict] = []
    cis, reported_per_run = [], []
    for run, block in zip(runs, blocks):
        ci, summ, run_rows = _run_rows(run, block, regime, label, names, settings, problems)
        cis.append(ci)
        reported_per_run.append(summ)
        rows += run_rows
    run_values = np.asarray([ci.estimate for ci in cis])
    rows += _condition_rows(runs, blocks, cis, run_values, regime, label, names, reported_per_run, settings)
    reported_names = {k for d in reported_per_run for k in d if not _NOT_SUMMARY_METRICS.match(k)} - set(names)
    reported, reported_rows = _reported_rows(runs, blocks, regime, label, reported_names, reported_per_run, settings)
    return Group(cond, regime, runs, blocks, names, run_values, reported), rows + reported_rows


def _common_blocks(runs, regime, label, problems):
    """The metrics every run has (sorted), and each run's per-prompt block of them."""
    blocks_all = [prompt_metrics(r.evals[regime].prompts) for r in runs]
    names = [n for n in blocks_all[0].names if all(n in b.names for b in blocks_all)]
    dropped = sorted({n for b in blocks_all for n in b.names} - set(names))
    if dropped:
        problems.append(f"{label} [{regime}]: metrics missing from some runs, not aggregated: "
                        + ", ".join(dropped))
    names.sort(key=metric_sort_key)
    blocks = [b.take(names) for b in blocks_all]
    if len({frozenset(b.ids.tolist()) for b in blocks}) > 1:
        problems.append(f"{label} [{regime}]: seeds were evaluated on different prompt sets "
                        f"({', '.join(str(len(b.ids)) for b in blocks)} prompts)")
    return names, blocks


def _run_rows(run, block, regime, label, names, s: Settings, problems):
    ci = ratio_bootstrap_ci(block.num, block.den, confidence=s.confidence, n_resamples=s.resamples,
                            rng=rng_for(s.seed, "run", run.rel, regime))
    summ = flatten_summary(run.evals[regime].summary)
    n_samples = int(run.evals[regime].prompts.n.sum())
    for key in [k for k in summ if k.startswith("verdicts/")]:
        # summary.json counts verdicts; the comparable number is their share of samples
        summ["verdict_rate/" + key.split("/", 1)[1]] = summ[key] / n_samples
    rows = []
    for m, name in enumerate(names):
        wl = wh = np.nan
        if block.wilson[m] is not None:
            wl, wh = wilson_interval(block.wilson[m][0].sum(), block.wilson[m][1].sum(), s.confidence)
        rep = summ.get(name, np.nan)
        if np.isfinite(rep) and np.isfinite(ci.estimate[m]) and abs(rep - ci.estimate[m]) > AGREEMENT_TOL:
            problems.append(f"{run.rel} [{regime}]: {name} recomputed from samples.jsonl is "
                            f"{ci.estimate[m]:.6g} but summary.json says {rep:.6g}")
        rows.append(_row("run", regime, label, run, name, ci.estimate[m], np.nan, 1, ci.low[m],
                         ci.high[m], f"{ci.method[m]} over prompts", wl, wh, rep, len(block.ids), n_samples))
    return ci, summ, rows


def _condition_rows(runs, blocks, cis, run_values, regime, label, names, reported_per_run, s: Settings):
    n_seeds = len(runs)
    # the recipe's mean: a t-interval over seeds (the unit of replication; each seed's value already
    # averages the shared prompts). One seed can only describe its model: its prompt bootstrap.
    if n_seeds > 1:
        lo, hi = (np.atleast_1d(v) for v in t_interval(run_values, s.confidence, axis=0))
        # a rate's interval stays in [0, 1] (a t-interval over 2-3 seeds can step outside it)
        bounded = np.asarray([bool(_RATE.search(n)) for n in names])
        lo, hi = np.where(bounded, np.clip(lo, 0.0, 1.0), lo), np.where(bounded, np.clip(hi, 0.0, 1.0), hi)
    else:
        lo, hi = np.asarray(cis[0].low, dtype=np.float64), np.asarray(cis[0].high, dtype=np.float64)
    sd = run_values.std(axis=0, ddof=1) if n_seeds > 1 else np.full(len(names), np.nan)
    n_prompts = int(round(np.mean([len(b.ids) for b in blocks])))
    n_samples = int(sum(r.evals[regime].prompts.n.sum() for r in runs))
    method = "t interval over seeds" if n_seeds > 1 else "bootstrap over prompts (1 seed)"
    rows = []
    for m, name in enumerate(names):
        wl = wh = np.nan
        if all(b.wilson[m] is not None for b in blocks):
            wl, wh = wilson_interval(sum(b.wilson[m][0].sum() for b in blocks),
                                     sum(b.wilson[m][1].sum() for b in blocks), s.confidence)
        rep = [d.get(name, np.nan) for d in reported_per_run]
        rows.append(_row("condition", regime, label, None, name, run_values[:, m].mean(), sd[m], n_seeds,
                         lo[m], hi[m], method, wl, wh, nanmean(rep), n_prompts, n_samples))
    return rows


def _reported_rows(runs, blocks, regime, label, reported_names, reported_per_run, s: Settings):
    """Numbers only summary.json has (no per-prompt data): per run as reported, t-interval over seeds."""
    n_prompts = int(round(np.mean([len(b.ids) for b in blocks])))
    n_samples = int(sum(r.evals[regime].prompts.n.sum() for r in runs))
    reported: dict[str, np.ndarray] = {}
    rows = []
    for name in sorted(reported_names, key=metric_sort_key):
        vals = np.asarray([d.get(name, np.nan) for d in reported_per_run], dtype=np.float64)
        reported[name] = vals
        for run, v in zip(runs, vals):
            if np.isfinite(v):
                rows.append(_row("run", regime, label, run, name, v, np.nan, 1, np.nan, np.nan,
                                 "reported by the run (no per-prompt data)", np.nan, np.nan, v,
                                 len(run.evals[regime].prompts), int(run.evals[regime].prompts.n.sum())))
        ok = vals[np.isfinite(vals)]
        if ok.size:
            tl, th = t_interval(ok, s.confidence)
            rows.append(_row("condition", regime, label, None, name, ok.mean(),
                             ok.std(ddof=1) if ok.size > 1 else np.nan, int(ok.size), tl, th,
                             "t interval over seeds", np.nan, np.nan, ok.mean(), n_prompts, n_samples))
    return reported, rows


def _row(level, regime, label, run, metric, value, sd, n_seeds, lo, hi, method, wl, wh, rep, n_prompts,
         n_samples) -> dict:
    return {
        "level": level, "regime": regime, "condition": label,
        "seed": "" if run is None else run.seed, "run": "" if run is None else run.rel,
        "metric": metric, "value": float(value), "sd_seeds": float(sd), "n_seeds": int(n_seeds),
        "ci_low": float(lo), "ci_high": float(hi), "ci_method": method,
        "wilson_low": float(wl), "wilson_high": float(wh), "reported": float(rep),
        "n_prompts": int(n_prompts), "n_samples": int(n_samples),
    }
