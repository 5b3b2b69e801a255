"""From a loaded sweep to tables: per-run and per-condition metrics with intervals, comparisons
with the baseline, training curves and steps-to-threshold. Plain data in, pandas tables out."""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ablate.metrics import prompt_ratios
from ablate.stats.intervals import (
    hierarchical_bootstrap_distribution,
    holm_bonferroni,
    iqm_ci,
    paired_test,
    percentile_interval,
    probability_of_improvement,
    ratio_bootstrap_ci,
    seed_test,
    t_interval,
    wilson_interval,
)
from ablate.stats.power import POWER, mdd, pooled_sd, power_line, seeds_needed
from ablate.stats.runs import PromptTable, Run, StatsInputError, Sweep, condition_label, normalise_override
from ablate.stats.study import Study, matches, sweep_study

KS = (1, 2, 4, 8, 16)
BASELINE_VALUES = {"none", "off", "uniform", "baseline", "default", "false", "null", "no"}
DEFAULT_REACH_METRIC = "train/reward_mean"
# held-out pass@1 on the fixed validation subset, logged every eval.every steps
VAL_REACH_METRIC = "val/pass@1"
DEFAULT_METRICS = ("pass@1",)
DEFAULT_EFFECT = 0.03
TRAIN_CAVEAT = "training reward: not a skill measure (easier batches reach it sooner)"
# summary.json numbers that equal a recomputed metric, or are bookkeeping, not results. The other numbers
# are shown next to the recomputed ones (`reported`); as both come from ablate.metrics' one table, a
# difference above AGREEMENT_TOL means the files disagree (summary.json edited or from another version).
_NOT_SUMMARY_METRICS = re.compile(
    r"^(regime|n_prompts|n_samples|verdicts/.*|verdict_rate/.*|by_operands/[^/]+/(n_prompts|n_samples))$")
AGREEMENT_TOL = 1e-4


@dataclass
class Settings:
    resamples: int = 10_000
    confidence: float = 0.95
    alpha: float = 0.05
    seed: int = 0
    metrics: Sequence[str] | None = None  # None: the study's metrics, else pass@1
    baseline: str | None = None
    reach: Sequence[str] = ()
    smooth: int = 5
    effect: float | None = None  # None: the study's effect, else DEFAULT_EFFECT
    power: bool = False  # also plan every metric (power.csv)
    names: Sequence[str] = ()  # --name LABEL:KEY=VALUE[,KEY=VALUE]


@dataclass
class MetricBlock:
    """Per-prompt numerators and denominators of every metric of one run in one regime."""

    ids: np.ndarray
    names: list[str]
    num: np.ndarray  # (P, M)
    den: np.ndarray  # (P, M)
    # per metric, the (successes, trials) sample counts a Wilson interval uses, or None
    wilson: list[tuple[np.ndarray, np.ndarray] | None]

    def take(self, names: Sequence[str]) -> "MetricBlock":
        idx = [self.names.index(n) for n in names]
        return MetricBlock(self.ids, list(names), self.num[:, idx], self.den[:, idx],
                           [self.wilson[i] for i in idx])

    def rows_for(self, ids: np.ndarray) -> np.ndarray:
        where = {pid: i for i, pid in enumerate(self.ids)}
        return np.asarray([where[pid] for pid in ids], dtype=np.int64)


def prompt_metrics(t: PromptTable, ks: Sequence[int] = KS) -> MetricBlock:
    """Every metric of `ablate.metrics.prompt_ratios` (the table evaluation sums into summary.json) as
    per-prompt num/den, and by_operands/<j>/<metric> for the prompts with j numbers."""
    names, nums, dens, wilson = [], [], [], []
    n, c = t.cols["n"], t.cols["n_correct"]
    # with the same n for every prompt, the mean of c/n is the sample success rate: Wilson applies
    sample_rate = (c, n) if bool(np.all(n == n[0])) else None
    ratios = prompt_ratios(t.cols, ks)
    masks = [(None, None)]
    if "n_numbers" in t.cols:
        # restricting a ratio of sums to a subset of prompts = zeroing the others' terms
        masks += [(f"by_operands/{j}/", (t.cols["n_numbers"] == j).astype(np.float64))
                  for j in sorted(set(t.cols["n_numbers"].astype(int).tolist()))]
    for prefix, mask in masks:
        for name, num, den, kind, repeated in ratios:
            if prefix is not None and not repeated:
                continue
            counts = (num, den) if kind == "counts" else sample_rate if kind == "samples" else None
            if mask is not None:
                num, den = num * mask, den * mask
                counts = None if counts is None else (counts[0] * mask, counts[1] * mask)
            names.append((prefix or "") + name)
            nums.append(np.asarray(num, dtype=np.float64))
            dens.append(np.asarray(den, dtype=np.float64))
            wilson.append(counts)
    return MetricBlock(t.ids, names, np.stack(nums, axis=1), np.stack(dens, axis=1), wilson)


def flatten_summary(summary: dict | None, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if not isinstance(summary, dict):
        return out
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_summary(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def metric_sort_key(name: str):
    m = re.fullmatch(r"pass@(\d+)", name)
    if m:
        return (0, int(m.group(1)), name)
    m = re.fullmatch(r"pass\^(\d+)", name)
    if m:
        return (0.5, int(m.group(1)), name)
    order = ["exact_pass@1", "coverage", "precision", "mixed_fraction", "best_of_n", "mean_response_length"]
    if name in order:
        return (1, order.index(name), name)
    parts = name.split("/")
    if parts[0] == "by_operands" and len(parts) == 3:
        return (3, int(parts[1]) if parts[1].isdigit() else 0, metric_sort_key(parts[2]), name)
    for rank, pre in enumerate(["verdict_rate/", "tool/"]):
        if name.startswith(pre):
            return (2 + 2 * rank, 0, name)
    return (9, 0, name)


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """A generator per (purpose, condition, regime, ...): results don't depend on processing order."""
    return np.random.default_rng([int(seed), zlib.crc32("\x1f".join(keys).encode())])


@dataclass
class Group:
    """One condition in one eval regime: the usable runs and their statistics."""

    condition: tuple[str, ...]
    regime: str
    runs: list[Run]
    blocks: list[MetricBlock]
    names: list[str]
    run_values: np.ndarray  # (S, M)
    hier: np.ndarray  # (B, M)
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

    def baselines_in(self, regime: str) -> set:
        """The conditions some condition evaluated in this regime is compared with."""
        return {b for (c, r), b in self.baseline_for.items() if r == regime and b is not None
                and (c, r) in self.groups}

    @property
    def n_ok(self) -> int:
        return int((self.inventory["outcome"] == "ok").sum()) if len(self.inventory) else 0


# ---------------------------------------------------------------------------------------------
# conditions and baseline


def display_labels(conditions: Sequence[tuple[str, ...]]) -> tuple[dict, list[str]]:
    """Label each condition by the overrides that distinguish it; return the shared ones too."""
    if not conditions:
        return {}, []
    common = set(conditions[0])
    for cond in conditions[1:]:
        common &= set(cond)
    labels = {}
    for cond in conditions:
        rest = [o for o in cond if o not in common]
        labels[cond] = ",".join(rest) if rest and len(conditions) > 1 else condition_label(cond)
    return labels, sorted(common)


def parse_assignments(spec: str, option: str = "--baseline") -> list[str]:
    items = [normalise_override(s) for s in spec.split(",") if s.strip()]
    for item in items:
        if "=" not in item:
            raise StatsInputError(f"{option} expects key=value[,key=value], got {spec!r}")
    return items


def parse_name(spec: str) -> tuple[str, list[str]]:
    """`--name 'oracle SFT:stage.trace=oracle'` -> ("oracle SFT", ["stage.trace=oracle"])."""
    label, sep, where = spec.partition(":")
    if not sep or not label.strip() or not where.strip():
        raise StatsInputError(f"--name expects LABEL:KEY=VALUE[,KEY=VALUE] (e.g. 'oracle SFT:stage.trace=oracle'), "
                              f"got {spec!r}")
    return label.strip(), parse_assignments(where, f"--name {label.strip()}:")


def name_conditions(keys: dict, configs: dict, study: Study | None, specs: Sequence[str],
                    problems: list[str]) -> dict:
    """Short labels: the study's `names` (label -> config match), then --name (label -> overrides the
    condition has; of several, the one with the fewest overrides), which win. Each name must pick
    exactly one condition and labels stay unique; a bad --name is an error, a bad study name a data
    problem (the name is not used). Labels only: the resampling generators are keyed by `keys`, so no
    number moves."""
    labels, by_cli = dict(keys), set()

    def fail(text: str, cli: bool) -> None:
        if cli:
            raise StatsInputError(text)
        problems.append(f"study {study.name}: {text}; name not used")

    candidates = [] if study is None else [
        (label, [c for c in keys if matches(configs.get(c), where)], "names " + repr(label), False)
        for label, where in study.names.items()]
    for spec in specs:
        label, want = parse_name(spec)
        hits = [c for c in keys if set(want) <= set(c)]
        fewest = min(map(len, hits), default=0)  # as --baseline: `stage=sft` is the plain one
        candidates.append((label, [c for c in hits if len(c) == fewest], f"--name {spec}", True))
    picks: dict[tuple, dict] = {}  # (cli, condition) -> {source: label}
    for label, hits, source, cli in candidates:
        if len(hits) != 1:
            listing = "; ".join(keys[c] for c in hits) or "none; conditions: " + "; ".join(keys.values())
            fail(f"{source} must match exactly one condition, it matches {len(hits)} ({listing})", cli)
        else:
            picks.setdefault((cli, hits[0]), {})[source] = label
    for (cli, c), named in sorted(picks.items(), key=lambda kv: kv[0][0]):  # --name last: it wins
        if len(named) > 1:
            fail(f"{' and '.join(named)} name the same condition ({keys[c]})", cli)
        else:
            labels[c] = next(iter(named.values()))
            by_cli |= {c} if cli else set()
    while True:
        seen: dict[str, list] = {}
        for c, label in labels.items():
            seen.setdefault(label, []).append(c)
        clash = next((cs for cs in seen.values() if len(cs) > 1), None)
        if clash is None:
            return labels
        text = f"the label {labels[clash[0]]!r} would name {len(clash)} conditions"
        if by_cli & set(clash):
            fail(text + " (" + "; ".join(keys[c] for c in clash) + ")", True)
        fail(text, False)
        for c in clash:
            labels[c] = keys[c]


def choose_baseline(conditions: Sequence[tuple[str, ...]], spec: str | None,
                    labels: dict) -> tuple[tuple[str, ...] | None, str]:
    conds = list(conditions)
    if not conds:
        return None, "no condition has usable runs"
    if spec:
        want = parse_assignments(spec)
        hits = [c for c in conds if set(want) <= set(c)]
        if not hits:
            avail = "; ".join(labels.get(c, condition_label(c)) for c in conds)
            raise StatsInputError(f"--baseline {spec} matches no condition with usable runs; "
                                  f"conditions: {avail}")
        fewest = min(len(c) for c in hits)
        best = [c for c in hits if len(c) == fewest]
        if len(best) > 1:
            avail = "; ".join(labels.get(c, condition_label(c)) for c in best)
            raise StatsInputError(f"--baseline {spec} is ambiguous; it matches: {avail}")
        return best[0], f"--baseline {spec}"
    subset = [c for c in conds if all(set(c) <= set(o) for o in conds)]
    if len(subset) == 1 and len(conds) > 1:
        return subset[0], "its overrides are a subset of every other condition's"
    common = set.intersection(*(set(c) for c in conds))

    def plain(c):
        rest = [o for o in c if o not in common]
        return bool(rest) and all(o.partition("=")[2].strip().lower() in BASELINE_VALUES for o in rest)

    plain_ones = [c for c in conds if plain(c)]
    if len(plain_ones) == 1:
        return plain_ones[0], "its distinguishing overrides are all none/off/uniform/baseline-like values"
    return conds[0], "first condition in sorted order (no condition's overrides are a subset of the others')"


# ---------------------------------------------------------------------------------------------
# the analysis


def analyze(sweep: Sweep, settings: Settings) -> Analysis:
    problems: list[str] = list(sweep.warnings)
    notes: list[str] = []
    cond_runs = sweep.conditions()
    all_conds = list(cond_runs)
    keys, common = display_labels(all_conds)
    for run in sweep.runs:
        for issue in run.issues:
            problems.append(f"{run.rel}: {issue}")

    explicit = settings.baseline is not None or settings.metrics is not None
    study = sweep_study(sweep.runs, explicit, problems)
    configs = _configs(cond_runs)
    labels = name_conditions(keys, configs, study, settings.names, problems)

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
    baseline_for, families = _assign_baselines(
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

    comparisons = _compare(groups, baseline_for, labels, keys, regimes, settings, problems, notes)
    power = _power_table(groups, baseline_for, labels, regimes, settings, len(comparisons)) \
        if settings.power else None
    curves = _curves(usable, labels, settings)
    reach = _reach(usable, labels, baseline_for, settings, notes)
    if baseline is not None and len(usable_conds) < 2:
        notes.append("Only one condition has usable runs: nothing to compare.")
    robust = _robust(groups, labels, regimes, settings)
    return Analysis(sweep, settings, labels, common, baseline, rule, regimes, inventory,
                    conditions_table, summary, comparisons, curves, reach, problems, notes, groups,
                    study, baseline_for, families, power, robust, keys)


ROBUST_COLUMNS = ["regime", "metric", "condition", "n_runs", "mean", "iqm", "iqm_ci_low", "iqm_ci_high",
                  "trimmed_per_side", "ci_method"]


def _robust(groups: dict, labels: dict, regimes: Sequence[str], s: Settings) -> pd.DataFrame:
    """rliable's interquartile mean over runs of each compared metric, per condition and regime, with
    its stratified-bootstrap interval. Its own generators: no other number of the report moves."""
    rows = []
    for regime in regimes:
        for metric in s.metrics:
            for (cond, r), g in groups.items():
                if r != regime:
                    continue
                values = g.values(metric)
                if values is None or not values.size:
                    continue
                ci = iqm_ci(values, confidence=s.confidence, n_resamples=s.resamples,
                            rng=rng_for(s.seed, "iqm", condition_label(cond), regime, metric))
                rows.append({"regime": regime, "metric": metric, "condition": labels[cond], "n_runs": int(values.size),
                             "mean": float(values.mean()), "iqm": ci.estimate, "iqm_ci_low": ci.low,
                             "iqm_ci_high": ci.high, "trimmed_per_side": int(0.25 * values.size),
                             "ci_method": ci.method})
    order = {label: i for i, label in enumerate(labels[c] for c in labels)}
    df = pd.DataFrame(rows, columns=ROBUST_COLUMNS)
    if len(df):
        df = df.sort_values(["regime", "metric", "condition"], key=lambda col: col.map(order) if col.name == "condition"
                            else col.map(lambda m: s.metrics.index(m)) if col.name == "metric" else col,
                            kind="stable").reset_index(drop=True)
    return df


def _study_metrics(study: Study | None, usable: dict, regimes: Sequence[str], problems: list[str]):
    if study is None or not study.metrics:
        return DEFAULT_METRICS
    have = set(available_metrics(usable, regimes))
    missing = [m for m in study.metrics if m not in have]
    if missing and regimes:
        problems.append(f"study {study.name}: metric(s) {', '.join(missing)} not found in any run; not compared")
    kept = tuple(m for m in study.metrics if m in have)
    return kept or DEFAULT_METRICS


def _configs(cond_runs: dict) -> dict:
    """condition -> the composed config of its first run that has one (seeds share the rest)."""
    return {c: next((r.config for r in runs if r.config is not None), None) for c, runs in cond_runs.items()}


def _assign_baselines(configs: dict, usable_conds, regimes, study: Study | None, global_base, labels,
                      problems: list[str]) -> tuple[dict, list[dict]]:
    """Map each (condition, regime) to its baseline: the first study rule whose family (and regime)
    matches it, else the global baseline. Regime None stands for steps to reach (metrics.csv has no
    eval regime), where only rules without `regime` apply."""
    keys = [(c, r) for c in usable_conds for r in [*regimes, None]]
    if study is None or not study.rules:
        return {k: global_base for k in keys}, []
    resolved, families = [], []
    for rule in study.rules:
        base = _rule_baseline(rule, configs, labels)
        resolved.append(base)
        families.append({"family": rule.describe(), "regime": rule.regime,
                         "baseline": None if base is None else labels[base],
                         "usable": base in usable_conds})
        if base is None:
            wanted = ", ".join(f"{k}={v}" for k, v in rule.baseline.items())
            problems.append(f"study {study.name}: no condition's config matches the baseline ({wanted}) of "
                            f"family {rule.describe()}; that family is not compared")
    out, fallback = {}, False
    for c, regime in keys:
        hit = next((i for i, rule in enumerate(study.rules) if matches(configs.get(c), rule.family)
                    and (rule.regime is None if regime is None else rule.regime in (None, regime))), None)
        out[(c, regime)] = global_base if hit is None else resolved[hit]
        fallback |= hit is None and c != global_base
    if fallback and global_base is not None:
        families.append({"family": "any other condition", "regime": None, "baseline": labels[global_base],
                         "usable": True})
    return out, families


def _rule_baseline(rule, configs: dict, labels: dict):
    hits = [c for c, cfg in configs.items() if matches(cfg, rule.baseline)]
    if len(hits) > 1:  # prefer the one inside the family, then the one with the fewest overrides
        hits = [c for c in hits if matches(configs[c], rule.family)] or hits
        fewest = min(len(c) for c in hits)
        hits = [c for c in hits if len(c) == fewest]
    if len(hits) > 1:
        wanted = ", ".join(f"{k}={v}" for k, v in rule.baseline.items())
        raise StatsInputError(f"the study's baseline ({wanted}) for family {rule.describe()} matches several "
                              f"conditions: {'; '.join(labels[c] for c in hits)}; pass --baseline to choose one")
    return hits[0] if hits else None


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
    s = settings
    blocks_all = [prompt_metrics(r.evals[regime].prompts) for r in runs]
    names = [n for n in blocks_all[0].names if all(n in b.names for b in blocks_all)]
    dropped = sorted({n for b in blocks_all for n in b.names} - set(names))
    if dropped:
        problems.append(f"{label} [{regime}]: metrics missing from some runs, not aggregated: "
                        + ", ".join(dropped))
    names.sort(key=metric_sort_key)
    blocks = [b.take(names) for b in blocks_all]
    id_sets = {frozenset(b.ids.tolist()) for b in blocks}
    if len(id_sets) > 1:
        problems.append(f"{label} [{regime}]: seeds were evaluated on different prompt sets "
                        f"({', '.join(str(len(b.ids)) for b in blocks)} prompts)")

    rows: list[dict] = []
    run_values, pools = [], []
    reported_names: set[str] = set()
    reported_per_run = []
    for run, block in zip(runs, blocks):
        ci = ratio_bootstrap_ci(block.num, block.den, confidence=s.confidence, n_resamples=s.resamples,
                                rng=rng_for(s.seed, "run", run.rel, regime))
        run_values.append(ci.estimate)
        pools.append(ci.distribution.T)
        summ = flatten_summary(run.evals[regime].summary)
        n_samples = float(run.evals[regime].prompts.n.sum())
        for key in [k for k in summ if k.startswith("verdicts/")]:
            # summary.json counts verdicts; the comparable number is their share of samples
            summ["verdict_rate/" + key.split("/", 1)[1]] = summ[key] / n_samples
        reported_per_run.append(summ)
        reported_names |= {k for k in summ if not _NOT_SUMMARY_METRICS.match(k)} - set(names)
        n_prompts, n_samples = len(block.ids), int(run.evals[regime].prompts.n.sum())
        for m, name in enumerate(names):
            wl = wh = np.nan
            if block.wilson[m] is not None:
                wl, wh = wilson_interval(block.wilson[m][0].sum(), block.wilson[m][1].sum(), s.confidence)
            rep = summ.get(name, np.nan)
            if np.isfinite(rep) and np.isfinite(ci.estimate[m]) and abs(rep - ci.estimate[m]) > AGREEMENT_TOL:
                problems.append(f"{run.rel} [{regime}]: {name} recomputed from samples.jsonl is "
                                f"{ci.estimate[m]:.6g} but summary.json says {rep:.6g}")
            rows.append(_row("run", regime, label, run, name, ci.estimate[m], np.nan, 1, ci.low[m],
                             ci.high[m], f"{ci.method[m]} over prompts", wl, wh, rep, n_prompts, n_samples))
    run_values = np.asarray(run_values)
    hier = hierarchical_bootstrap_distribution(
        [b.num for b in blocks], [b.den for b in blocks], n_resamples=s.resamples,
        rng=rng_for(s.seed, "hier", condition_label(cond), regime), replicates=pools)
    lo, hi = percentile_interval(hier.T, s.confidence, axis=-1)
    lo, hi = np.atleast_1d(lo), np.atleast_1d(hi)
    n_seeds = len(runs)
    sd = run_values.std(axis=0, ddof=1) if n_seeds > 1 else np.full(len(names), np.nan)
    n_prompts = int(round(np.mean([len(b.ids) for b in blocks])))
    n_samples = int(sum(r.evals[regime].prompts.n.sum() for r in runs))
    method = "hierarchical bootstrap (seeds, then prompts)" if n_seeds > 1 else "bootstrap over prompts (1 seed)"
    for m, name in enumerate(names):
        wl = wh = np.nan
        if all(b.wilson[m] is not None for b in blocks):
            wl, wh = wilson_interval(sum(b.wilson[m][0].sum() for b in blocks),
                                     sum(b.wilson[m][1].sum() for b in blocks), s.confidence)
        rep = [d.get(name, np.nan) for d in reported_per_run]
        rows.append(_row("condition", regime, label, None, name, run_values[:, m].mean(), sd[m], n_seeds,
                         lo[m], hi[m], method, wl, wh, _nanmean(rep), n_prompts, n_samples))

    reported: dict[str, np.ndarray] = {}
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
    group = Group(cond, regime, runs, blocks, names, run_values, hier, reported)
    return group, rows


def _nanmean(values) -> float:
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else np.nan


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


def available_metrics(usable: dict, regimes: Sequence[str]) -> list[str]:
    """Every metric name some usable run has, cheaply (no resampling)."""
    names: set[str] = set()
    for runs in usable.values():
        for run in runs:
            for regime in regimes:
                ev = run.evals.get(regime)
                if ev is None or not ev.usable:
                    continue
                names |= set(prompt_metrics(ev.prompts).names)
                names |= {k for k in flatten_summary(ev.summary) if not _NOT_SUMMARY_METRICS.match(k)}
    return sorted(names, key=metric_sort_key)


def _check_requested_metrics(metrics: Sequence[str], usable: dict, regimes: Sequence[str]) -> None:
    if not regimes:
        return
    have = available_metrics(usable, regimes)
    unknown = [m for m in metrics if m not in have]
    if unknown:
        raise StatsInputError(f"--metric {', '.join(unknown)}: not found in any run; available: "
                              + ", ".join(have))


COMPARISON_COLUMNS = [
    "regime", "metric", "condition", "baseline", "n_seeds", "n_seeds_baseline", "mean", "mean_baseline",
    "diff", "diff_ci_low", "diff_ci_high", "n_shared_prompts", "paired_diff", "paired_ci_low",
    "paired_ci_high", "p_paired", "p_paired_holm", "significant_paired", "p_seed", "p_seed_holm",
    "significant_seed", "poi", "poi_ci_low", "poi_ci_high", "verdict", "note",
    "sd_seeds_pooled", "alpha_power", "mdd", "effect", "seeds_needed", "power_note",
]
POWER_COLUMNS = ["regime", "metric", "deciding", "condition", "baseline", "n_seeds", "n_seeds_baseline", "diff",
                 "sd_seeds_pooled", "alpha_power", "power", "mdd", "effect", "seeds_needed"]


def _pairs(groups: dict, baseline_for: dict, regime: str, notes: list[str]) -> list[tuple]:
    """(group, baseline group) for every condition of a regime that has a baseline other than itself."""
    out, lacking = [], {}
    for (c, r), g in groups.items():
        b = baseline_for.get((c, r))
        if r != regime or b is None or b == c:
            continue
        base = groups.get((b, regime))
        if base is None:
            lacking.setdefault(b, []).append(c)
        else:
            out.append((g, base))
    if len({baseline_for.get((c, r)) for (c, r) in groups if r == regime}) <= 1:
        if lacking:
            notes.append(f"Regime `{regime}`: the baseline has no usable runs, no comparisons.")
    else:
        for b, conds in lacking.items():
            notes.append(f"Regime `{regime}`: baseline {condition_label(b)} has no usable runs; "
                         f"{len(conds)} condition(s) of its family not compared.")
    return out


def _compare(groups, baseline_for, labels, keys, regimes, settings: Settings, problems, notes) -> pd.DataFrame:
    s = settings
    rows: list[dict] = []
    for regime in regimes:
        pairs = _pairs(groups, baseline_for, regime, notes)
        for metric in s.metrics:
            for g, base in pairs:
                row = _compare_one(g, base, metric, labels, keys, s, problems)
                if row is not None:
                    rows.append(row)
                elif any(metric in (x.names + list(x.reported)) for x in (g, base)):
                    notes.append(f"{metric} in regime `{regime}`: not available for both "
                                 f"{labels[g.condition]} and the baseline; not compared.")
    table = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    if len(table):
        for test in ("paired", "seed"):
            reject, adj = holm_bonferroni(table[f"p_{test}"].to_numpy(dtype=float), s.alpha)
            table[f"p_{test}_holm"] = adj
            table[f"significant_{test}"] = [bool(r) if np.isfinite(a) else None for r, a in zip(reject, adj)]
        table["verdict"] = [_verdict(r, s.alpha) for r in table.to_dict("records")]
        _plan(table, s, len(table))
        # the plan is for the seed-level test, so a comparison significant only on the shared
        # prompts still gets its line: across seeds it is undecided
        table["power_note"] = [
            "" if r["significant_seed"] is True else
            power_line(int(r["n_seeds"]), int(r["n_seeds_baseline"]), r["sd_seeds_pooled"], r["mdd"],
                       r["seeds_needed"], r["effect"], _fmt3) for r in table.to_dict("records")]
    return table


def _fmt3(v: float) -> str:
    return f"{v:.3g}" if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3) else f"{v:.3f}"


def _plan(table: pd.DataFrame, s: Settings, m: int) -> None:
    """MDD at the current seeds and seeds needed for the effect, at Holm's first step (alpha/m, the
    bar the smallest p-value must clear: conservative for the later steps)."""
    alpha = s.alpha / max(1, m)
    table["alpha_power"] = alpha
    table["effect"] = s.effect
    table["mdd"] = [mdd(sd, int(n1), int(n2), alpha) for sd, n1, n2
                    in zip(table["sd_seeds_pooled"], table["n_seeds"], table["n_seeds_baseline"])]
    table["seeds_needed"] = [seeds_needed(sd, s.effect, alpha) for sd in table["sd_seeds_pooled"]]


def _power_table(groups, baseline_for, labels, regimes, s: Settings, m: int) -> pd.DataFrame:
    """Every metric both sides have, for every comparison the report makes (--power). alpha/m uses
    the report's own number of comparisons m."""
    rows = []
    for regime in regimes:
        for g, base in _pairs(groups, baseline_for, regime, []):
            names = [n for n in g.names if n in base.names]
            reported = [n for n in g.reported if n in base.reported and n not in names]
            for name in names + reported:
                x, y = g.values(name), base.values(name)
                if not (x.size and y.size):
                    continue
                rows.append({"regime": regime, "metric": name, "deciding": name in s.metrics,
                             "condition": labels[g.condition], "baseline": labels[base.condition],
                             "n_seeds": int(x.size), "n_seeds_baseline": int(y.size),
                             "diff": float(x.mean() - y.mean()), "sd_seeds_pooled": pooled_sd(x, y)})
    table = pd.DataFrame(rows, columns=POWER_COLUMNS)
    if len(table):
        _plan(table, s, m)
        table["power"] = POWER
    return table[POWER_COLUMNS]


def _compare_one(g: Group, base: Group, metric: str, labels, keys, s: Settings, problems) -> dict | None:
    label, blabel = labels[g.condition], labels[base.condition]
    row = {c: np.nan for c in COMPARISON_COLUMNS}
    row.update({"regime": g.regime, "metric": metric, "condition": label, "baseline": blabel,
                "n_seeds": len(g.runs), "n_seeds_baseline": len(base.runs), "note": "",
                "n_shared_prompts": 0})
    reasons = []
    key = f"{label} vs {blabel} [{g.regime}] {metric}"
    rng_key = f"{keys[g.condition]} vs {keys[base.condition]} [{g.regime}] {metric}"
    if metric in g.names and metric in base.names:
        m, mb = g.names.index(metric), base.names.index(metric)
        x, y = g.run_values[:, m], base.run_values[:, mb]
        diff_dist = g.hier[:, m] - base.hier[:, mb]
        dl, dh = percentile_interval(diff_dist, s.confidence)
        row.update(mean=x.mean(), mean_baseline=y.mean(), diff=x.mean() - y.mean(), diff_ci_low=dl,
                   diff_ci_high=dh)
        shared = _shared_ids(g.blocks + base.blocks)
        union = set().union(*(set(b.ids.tolist()) for b in g.blocks + base.blocks))
        row["n_shared_prompts"] = len(shared)
        if not shared.size:
            reasons.append("no shared prompt ids: paired test skipped")
            problems.append(
                f"{key}: the two conditions share no test prompt ids (runs {', '.join(r.rel for r in g.runs)} "
                f"vs {', '.join(r.rel for r in base.runs)}); they were evaluated on different test sets, "
                "so the paired test is skipped")
        else:
            if len(shared) < len(union):
                reasons.append(f"paired test on the {len(shared)} of {len(union)} prompts every run has")
            xn, xd = _per_prompt(g.blocks, shared, m)
            yn, yd = _per_prompt(base.blocks, shared, mb)
            pt = paired_test(xn, yn, xd, yd, confidence=s.confidence, n_resamples=s.resamples,
                             rng=rng_for(s.seed, "paired", rng_key))
            row.update(paired_diff=pt.diff, paired_ci_low=pt.low, paired_ci_high=pt.high, p_paired=pt.p_value)
    elif metric in g.reported and metric in base.reported:
        x, y = g.reported[metric], base.reported[metric]
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        if x.size == 0 or y.size == 0:
            return None
        row.update(mean=x.mean(), mean_baseline=y.mean(), diff=x.mean() - y.mean())
        reasons.append("only the runs' own summary numbers exist: seed-level test only")
    else:
        return None
    row["sd_seeds_pooled"] = pooled_sd(x, y)
    st = seed_test(x, y)
    row["p_seed"] = st.p_value
    if st.note and not np.isfinite(st.p_value):
        reasons.append(f"seed-level test: {st.note}")
    poi = probability_of_improvement(x, y, confidence=s.confidence, n_resamples=s.resamples,
                                     rng=rng_for(s.seed, "poi", rng_key))
    row.update(poi=poi.estimate, poi_ci_low=poi.low, poi_ci_high=poi.high)
    row["note"] = "; ".join(reasons)
    return row


def _shared_ids(blocks: Sequence[MetricBlock]) -> np.ndarray:
    common = set(blocks[0].ids.tolist())
    for b in blocks[1:]:
        common &= set(b.ids.tolist())
    return np.asarray(sorted(common), dtype=object)


def _per_prompt(blocks: Sequence[MetricBlock], ids: np.ndarray, m: int):
    """Per-prompt numerator and denominator averaged over a condition's seeds."""
    num = np.zeros(len(ids))
    den = np.zeros(len(ids))
    for b in blocks:
        rows = b.rows_for(ids)
        num += b.num[rows, m]
        den += b.den[rows, m]
    return num / len(blocks), den / len(blocks)


def _verdict(r: dict, alpha: float) -> str:
    def state(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return None
        return bool(x)

    sp, ss = state(r["significant_paired"]), state(r["significant_seed"])
    diff = r["diff"]
    direction = "higher" if diff > 0 else "lower" if diff < 0 else "equal"
    after = f"at α={alpha:g} after Holm correction"
    if sp is None and ss is None:
        return "no test possible (" + (r["note"] or "too few data") + ")"
    if sp and ss:
        return f"{direction}; significant {after} (paired prompt test and seed-level test)"
    if sp:
        tail = "not significant across seeds (seed-level test)" if ss is not None else "seed-level test not possible"
        return f"{direction}; significant on the shared prompts (paired test) {after}, but {tail}"
    if ss:
        tail = "not significant on the shared prompts (paired test)" if sp is not None else "no paired test"
        return f"{direction}; significant across seeds (seed-level test) {after}, but {tail}"
    return f"not significant {after}"


# ---------------------------------------------------------------------------------------------
# training curves


CURVE_COLUMNS = ["condition", "metric", "step", "mean", "ci_low", "ci_high", "n_seeds"]


def curve_columns(usable: dict) -> list[str]:
    cols = {c for runs in usable.values() for r in runs if r.metrics is not None for c in r.metrics.columns}
    return sorted(cols, key=lambda c: (not c.startswith("val/"), c != VAL_REACH_METRIC, c != DEFAULT_REACH_METRIC,
                                       not c.startswith("train/"), c))


def _curves(usable: dict, labels: dict, s: Settings) -> pd.DataFrame:
    parts = []
    for cond, runs in usable.items():
        frames = [r.metrics for r in runs if r.metrics is not None]
        if not frames:
            continue
        for col in curve_columns({cond: runs}):
            series = [f[col].rename(i) for i, f in enumerate(frames) if col in f.columns]
            wide = pd.concat(series, axis=1)
            values = wide.to_numpy(dtype=np.float64)
            n = np.isfinite(values).sum(axis=1)
            keep = n > 0
            lo, hi = t_interval(values[keep], s.confidence, axis=1)
            with np.errstate(invalid="ignore"):
                mean = np.nanmean(values[keep], axis=1)
            parts.append(pd.DataFrame({
                "condition": labels[cond], "metric": col, "step": wide.index.to_numpy()[keep],
                "mean": mean, "ci_low": np.atleast_1d(lo), "ci_high": np.atleast_1d(hi),
                "n_seeds": n[keep],
            }))
    if not parts:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return pd.concat(parts, ignore_index=True)[CURVE_COLUMNS]


REACH_COLUMNS = ["level", "condition", "run", "seed", "metric", "op", "threshold", "reached", "runs",
                 "step", "step_ci_low", "step_ci_high", "time_s", "source", "caveat"]
_REACH = re.compile(r"^\s*(.+?)\s*(>=|<=|=)\s*([-+0-9.eEinfINFnaN]+)\s*$")
_TIME_COLUMNS = ("time/elapsed_s", "elapsed_s", "time/elapsed", "wall_time_s", "time_s")


def parse_reach(spec: str) -> tuple[str, str, float]:
    m = _REACH.match(spec)
    if not m:
        raise StatsInputError(f"--reach expects METRIC>=VALUE, METRIC<=VALUE or METRIC=VALUE, got {spec!r}")
    try:
        value = float(m.group(3))
    except ValueError:
        raise StatsInputError(f"--reach {spec}: {m.group(3)!r} is not a number") from None
    op = ">=" if m.group(2) == "=" else m.group(2)
    return m.group(1), op, value


def smoothed(series: pd.Series, window: int) -> pd.Series:
    s = series.dropna()
    w = max(1, min(window, len(s)))
    return s.rolling(window=w, min_periods=w).mean().dropna()


def first_reach(series: pd.Series, op: str, threshold: float, window: int):
    sm = smoothed(series, window)
    hit = sm >= threshold if op == ">=" else sm <= threshold
    if not hit.any():
        return None
    return hit.idxmax()


def _time_column(frame: pd.DataFrame) -> str | None:
    for c in _TIME_COLUMNS:
        if c in frame.columns:
            return c
    return next((c for c in frame.columns if c.endswith("elapsed_s")), None)


def reach_window(metric: str, s: Settings) -> int:
    """Running-mean window for steps to reach. val/ columns are not smoothed: each is an evaluation
    of a fixed validation subset (already a mean over hundreds of samples, far less noisy than one
    batch's training reward), and a window of W evaluations every N steps spans W*N steps, which
    would delay every reached step by about (W-1)*N/2 steps: a bias as large as the effects the
    study looks for. The threshold (the baseline's final value) is then unsmoothed too."""
    return 1 if metric.startswith("val/") else s.smooth


def _final(runs: Sequence[Run], metric: str, window: int) -> float | None:
    ends = [smoothed(r.metrics[metric], window) for r in runs
            if r.metrics is not None and metric in r.metrics.columns]
    ends = [e.iloc[-1] for e in ends if len(e)]
    return float(np.mean(ends)) if ends else None


def _reach(usable: dict, labels: dict, baseline_for: dict, s: Settings, notes: list[str]) -> pd.DataFrame:
    """Steps (and seconds) to a threshold. Default: held-out val/pass@1 when logged, else the training
    reward, up to the final value of each condition's baseline (its study family's, with a study)."""
    specs: list[tuple[str, str, float, str, list]] = []
    for spec in s.reach:
        metric, op, value = parse_reach(spec)
        specs.append((metric, op, value, f"--reach {spec}", list(usable)))
    if not specs:
        logged = {c for runs in usable.values() for r in runs if r.metrics is not None for c in r.metrics.columns}
        metric = VAL_REACH_METRIC if VAL_REACH_METRIC in logged else DEFAULT_REACH_METRIC
        window = reach_window(metric, s)
        bases = list(dict.fromkeys(b for (_, r), b in baseline_for.items() if r is None and b is not None))
        for b in bases:
            thr = _final(usable.get(b, []), metric, window)
            if thr is None:
                continue
            whose = "baseline's" if len(bases) == 1 else f"baseline {labels[b]}'s"
            how = (f"last {s.smooth}-step averages" if window > 1 else "last evaluations")
            members = [c for c in usable if c == b or baseline_for.get((c, None)) == b]
            specs.append((metric, ">=", thr, f"{whose} final {metric} (mean of its seeds' {how})", members))
    rows = []
    for metric, op, thr, source, members in specs:
        seen_metric = False
        caveat = TRAIN_CAVEAT if metric.startswith("train/") else ""
        window = reach_window(metric, s)
        for cond in members:
            steps, times = [], []
            for run in usable[cond]:
                f = run.metrics
                if f is None or metric not in f.columns:
                    continue
                seen_metric = True
                step = first_reach(f[metric], op, thr, window)
                tcol = _time_column(f)
                t = np.nan
                if step is not None and tcol is not None:
                    t = float(f[tcol].loc[:step].dropna().iloc[-1]) if f[tcol].loc[:step].notna().any() else np.nan
                steps.append(np.nan if step is None else float(step))
                times.append(t)
                rows.append({"level": "run", "condition": labels[cond], "run": run.rel, "seed": run.seed,
                             "metric": metric, "op": op, "threshold": thr, "reached": step is not None,
                             "runs": 1, "step": np.nan if step is None else float(step),
                             "step_ci_low": np.nan, "step_ci_high": np.nan, "time_s": t, "source": source,
                             "caveat": caveat})
            if steps:
                arr = np.asarray(steps)
                got = arr[np.isfinite(arr)]
                lo, hi = t_interval(got, s.confidence) if got.size else (np.nan, np.nan)
                rows.append({"level": "condition", "condition": labels[cond], "run": "", "seed": "",
                             "metric": metric, "op": op, "threshold": thr, "reached": int(got.size),
                             "runs": int(arr.size), "step": float(got.mean()) if got.size else np.nan,
                             "step_ci_low": lo, "step_ci_high": hi, "time_s": _nanmean(times), "source": source,
                             "caveat": caveat})
        if not seen_metric:
            notes.append(f"Steps to reach {metric} {op} {thr:g}: no run logs `{metric}` in metrics.csv.")
    return pd.DataFrame(rows, columns=REACH_COLUMNS)
