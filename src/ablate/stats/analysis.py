"""From a loaded sweep to tables: per-run and per-condition metrics with intervals, comparisons
with the baseline, training curves and steps-to-threshold. Plain data in, pandas tables out."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ablate.stats.blocks import (  # noqa: F401  (re-exported: report and tests read them here)
    _NOT_SUMMARY_METRICS,
    AGREEMENT_TOL,
    KS,
    MetricBlock,
    available_metrics,
    flatten_summary,
    metric_sort_key,
    prompt_metrics,
)
from ablate.stats.compare import compare_all, power_table
from ablate.stats.conditions import assign_baselines, choose_baseline, label_sweep
from ablate.stats.curves import (  # noqa: F401  (re-exported: tests and report read them here)
    DEFAULT_REACH_METRIC,
    TRAIN_CAVEAT,
    VAL_REACH_METRIC,
    curves_table,
    reach_table,
)
from ablate.stats.engine import ClaimsResult
from ablate.stats.intervals import nanmean, ratio_bootstrap_ci, rng_for, t_interval, wilson_interval
from ablate.stats.robust import profile_table, robust_table
from ablate.stats.runs import Run, StatsInputError, Sweep, condition_label, mixed_starts
from ablate.stats.settings import Settings  # noqa: F401  (re-exported: the CLI and tests build it here)
from ablate.stats.study import Study

DEFAULT_METRICS = ("pass@1",)
# metrics that are rates or shares in [0, 1] (their condition intervals are clipped to it)
_RATE = re.compile(r"(^|/)(pass[@^]\d+|exact_pass@1|coverage|precision|mixed_fraction|best_of_n|verdict_rate/.*"
                   r"|tool/calc_emission_rate)$")
DEFAULT_EFFECT = 0.03


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


@dataclass
class Analysis:
    sweep: Sweep
    settings: Settings
    labels: dict[tuple[str, ...], str]
    common: list[str]
    baseline: tuple[str, ...] | None
    baseline_rule: str
    regimes: list[str]
    inventory: pd.DataFrame
    conditions: pd.DataFrame
    summary: pd.DataFrame
    comparisons: pd.DataFrame
    curves: pd.DataFrame
    reach: pd.DataFrame
    problems: list[str]
    notes: list[str]
    groups: dict[tuple[tuple[str, ...], str], Group] = field(default_factory=dict)
    study: Study | None = None
    # (condition, regime) -> the condition it is compared with; regime None: for steps to reach
    baseline_for: dict = field(default_factory=dict)
    families: list[dict] = field(default_factory=list)  # the study's rules as resolved, for the header
    power: pd.DataFrame | None = None  # every metric's plan (--power)
    robust: pd.DataFrame | None = None  # IQM over runs of the compared metrics (rliable)
    # condition -> its label without names: what resampling generators are keyed by
    keys: dict = field(default_factory=dict)
    claims: ClaimsResult | None = None  # the study's declared claims and their verdicts
    mechanisms: pd.DataFrame | None = None  # the study's declared mechanisms, per run (ablate.stats.mechanisms)
    profiles: pd.DataFrame | None = None  # the compared metrics' performance profiles (ablate.stats.robust)

    def baselines_in(self, regime: str) -> set:
        """The conditions some condition evaluated in this regime is compared with."""
        return {b for (c, r), b in self.baseline_for.items() if r == regime and b is not None
                and (c, r) in self.groups}

    @property
    def n_ok(self) -> int:
        return int((self.inventory["outcome"] == "ok").sum()) if len(self.inventory) else 0


# ---------------------------------------------------------------------------------------------
# the analysis


def analyze(sweep: Sweep, settings: Settings) -> Analysis:
    problems: list[str] = list(sweep.warnings)
    notes: list[str] = []
    cond_runs = sweep.conditions()
    all_conds = list(cond_runs)
    for run in sweep.runs:
        for issue in run.issues:
            problems.append(f"{run.rel}: {issue}")
    problems += mixed_starts(sweep.runs)

    explicit = settings.baseline is not None or settings.metrics is not None
    study, keys, common, labels, configs = label_sweep(sweep, settings.names, explicit, problems)

    inventory = _inventory(sweep, labels)
    conditions_table = _condition_counts(cond_runs, sweep, labels)

    usable = {c: [r for r in runs if r.ok] for c, runs in cond_runs.items()}
    usable_conds = [c for c in all_conds if usable[c]]
    baseline, rule = choose_baseline(usable_conds, settings.baseline, labels)
    regimes = sorted({name for runs in usable.values() for r in runs
                      for name, ev in r.evals.items() if ev.usable})

    if settings.metrics is None:
        metrics = _study_metrics(study, usable, regimes, problems)
    else:
        metrics = tuple(settings.metrics)
        _check_requested_metrics(metrics, usable, regimes)
    effect = settings.effect or (study.effect if study is not None else None) or DEFAULT_EFFECT
    settings = dataclasses.replace(settings, metrics=metrics, effect=effect)
    baseline_for, families = assign_baselines(
        configs, usable_conds, regimes, None if settings.baseline else study, baseline, labels, problems)
    groups: dict[tuple[tuple[str, ...], str], Group] = {}
    summary_rows: list[dict] = []
    for regime in regimes:
        for cond in usable_conds:
            runs = [r for r in usable[cond] if regime in r.evals and r.evals[regime].usable]
            if not runs:
                continue
            group, rows = _analyze_group(cond, regime, runs, labels[cond], settings, problems)
            groups[(cond, regime)] = group
            summary_rows.extend(rows)
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)

    comparisons = compare_all(groups, baseline_for, labels, keys, regimes, settings, problems, notes)
    power = power_table(groups, baseline_for, labels, regimes, settings, len(comparisons)) \
        if settings.power else None
    curves = curves_table(usable, labels, settings)
    reach = reach_table(usable, labels, baseline_for, settings, notes)
    if baseline is not None and len(usable_conds) < 2:
        notes.append("Only one condition has usable runs: nothing to compare.")
    robust = robust_table(groups, labels, regimes, settings)
    claims = None
    if study is not None and study.declared.claims:
        from ablate.stats.standing import sweep_decided

        claims = sweep_decided(sweep, study, labels, regimes, effect, settings.registration, settings.report_dir)
        problems.extend(claims.problems)
    return Analysis(sweep=sweep, settings=settings, labels=labels, common=common, baseline=baseline,
                    baseline_rule=rule, regimes=regimes, inventory=inventory, conditions=conditions_table,
                    summary=summary, comparisons=comparisons, curves=curves, reach=reach, problems=problems,
                    notes=notes, groups=groups, study=study, baseline_for=baseline_for, families=families,
                    power=power, robust=robust, keys=keys, claims=claims,
                    mechanisms=_mechanisms(sweep, study, labels, regimes, problems, notes),
                    profiles=profile_table(summary, labels, keys, regimes, settings))


def _mechanisms(sweep: Sweep, study: Study | None, labels: dict, regimes: Sequence[str], problems: list[str],
                notes: list[str]):
    """The study's declared mechanisms per run (None when it declares none); the runs' block, else today's
    preset of the study's name (a note says so: mechanisms describe, so this is no data problem)."""
    from ablate.stats.mechanisms import declared_mechanisms, mechanism_table, preset_mechanisms
    from ablate.stats.values import sweep_values

    if study is None:
        return None
    declared = declared_mechanisms(study.block, problems) or preset_mechanisms(study.name, notes)
    if not declared:
        return None
    return mechanism_table(sweep_values(sweep, labels, list(declared.values()), regimes), declared)


def _study_metrics(study: Study | None, usable: dict, regimes: Sequence[str], problems: list[str]):
    if study is None or not study.metrics:
        return DEFAULT_METRICS
    have = set(available_metrics(usable, regimes))
    missing = [m for m in study.metrics if m not in have]
    if missing and regimes:
        problems.append(f"study {study.name}: metric(s) {', '.join(missing)} not found in any run; not compared")
    kept = tuple(m for m in study.metrics if m in have)
    return kept or DEFAULT_METRICS


SUMMARY_COLUMNS = [
    "level", "regime", "condition", "seed", "run", "metric", "value", "sd_seeds", "n_seeds",
    "ci_low", "ci_high", "ci_method", "wilson_low", "wilson_high", "reported", "n_prompts", "n_samples",
]


def _inventory(sweep: Sweep, labels: dict) -> pd.DataFrame:
    rows = []
    for run in sorted(sweep.runs, key=lambda r: (r.condition, r.rel)):
        rows.append({
            "run": run.rel, "path": str(run.path), "condition": labels.get(run.condition, run.label),
            "overrides": run.label, "seed": run.seed, "state": run.state, "outcome": run.outcome,
            "reason": run.reason,
            "regimes": ",".join(k for k, v in run.evals.items() if v.usable),
            "issues": len(run.issues), "warnings": " | ".join(run.warnings),
        })
    for cond, seed, why in sweep.never_started:
        rows.append({"run": "", "path": "", "condition": labels.get(cond, condition_label(cond)),
                     "overrides": condition_label(cond), "seed": seed, "state": "never started",
                     "outcome": "missing", "reason": why,
                     "regimes": "", "issues": 0, "warnings": ""})
    return pd.DataFrame(rows, columns=["run", "path", "condition", "overrides", "seed", "state", "outcome",
                                       "reason", "regimes", "issues", "warnings"])


def _condition_counts(cond_runs: dict, sweep: Sweep, labels: dict) -> pd.DataFrame:
    rows = []
    for cond, runs in cond_runs.items():
        outcomes = [r.outcome for r in runs]
        never = sum(1 for c, _, _ in sweep.never_started if c == cond)
        rows.append({
            "condition": labels[cond], "overrides": condition_label(cond),
            "runs": len(runs) + never, "ok": outcomes.count("ok"), "failed": outcomes.count("failed"),
            "running": outcomes.count("running"), "missing": outcomes.count("missing") + never,
            "seeds_ok": ",".join(str(r.seed) for r in runs if r.ok),
        })
    return pd.DataFrame(rows, columns=["condition", "overrides", "runs", "ok", "failed", "running",
                                       "missing", "seeds_ok"])


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


def _check_requested_metrics(metrics: Sequence[str], usable: dict, regimes: Sequence[str]) -> None:
    if not regimes:
        return
    have = available_metrics(usable, regimes)
    unknown = [m for m in metrics if m not in have]
    if unknown:
        raise StatsInputError(f"--metric {', '.join(unknown)}: not found in any run; available: "
                              + ", ".join(have))

