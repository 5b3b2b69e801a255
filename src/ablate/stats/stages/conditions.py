"""The conditions stage: a loaded sweep's runs grouped into conditions (a condition is its runs'
overrides minus `seed` and where it ran, a tuple such as ("curriculum=static", "stage=rloo")), each with its label (the
overrides that distinguish it, or a name), its usable runs, and the baseline it is compared with (a
study's rules, --baseline, or the fallback rules). `group_conditions` returns it all as `Conditions`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from ablate.rundir.status import EFFECTIVE_BATCH, data_parallel
from ablate.stats.claims.study import Study, matches, sweep_study
from ablate.stats.read.runs import (Run, StatsInputError, Sweep, condition_label, mixed_starts, normalise_override,
                               unbalanced_machines)
from ablate.stats.stages.settings import Settings
from ablate.stats.values.blocks import available_metrics

BASELINE_VALUES = {"none", "off", "uniform", "baseline", "default", "false", "null", "no"}
DEFAULT_METRICS = ("pass@1",)
DEFAULT_EFFECT = 0.03
ONE_CONDITION = "Only one condition has usable runs: nothing to compare."

Condition = tuple[str, ...]


@dataclass(frozen=True)
class Conditions:
    """What each run is, which runs count, and which condition each is compared with."""

    sweep: Sweep
    settings: Settings  # the command's, with `metrics` and `effect` resolved (the study's, else the defaults)
    study: Study | None  # the study the runs declare (None: none, or runs of several studies pooled)
    labels: dict[Condition, str]  # every condition -> its shown label; the report's order of conditions
    keys: dict[Condition, str]  # every condition -> its label without names: what resampling generators are keyed by
    common: list[str]  # the overrides every condition shares
    usable: dict[Condition, list[Run]]  # every condition -> its completed runs (maybe none), in the sweep's order
    regimes: list[str]  # the eval regimes some usable run has, sorted
    baseline: Condition | None  # the global baseline (None: no condition has usable runs)
    baseline_rule: str  # why that one
    baseline_for: dict[tuple[Condition, str | None], Condition | None]  # (condition, regime) -> its baseline;
    # regime None stands for steps to reach (metrics.csv has no regime)
    families: list[dict]  # the study's baseline rules as resolved: family, regime, baseline (a label), usable
    inventory: pd.DataFrame  # runs.csv: every run and never-started job, its outcome and why (INVENTORY_COLUMNS)
    table: pd.DataFrame  # per condition: runs, ok, failed, running, missing, seeds used (COUNT_COLUMNS)
    problems: list[str]  # the sweep's and the runs' data problems, the study's and the baselines'
    notes: list[str]  # a sweep with one usable condition says so

    @property
    def usable_conditions(self) -> list[Condition]:
        """The conditions with at least one usable run, in the sweep's order."""
        return [c for c, runs in self.usable.items() if runs]

    @property
    def n_ok(self) -> int:
        return int((self.inventory["outcome"] == "ok").sum()) if len(self.inventory) else 0


def group_conditions(sweep: Sweep, settings: Settings) -> Conditions:
    """The conditions stage of a loaded sweep under the command's settings."""
    problems = list(sweep.warnings) + [f"{run.rel}: {issue}" for run in sweep.runs for issue in run.issues]
    problems += mixed_starts(sweep.runs) + unbalanced_machines(sweep.runs) + mixed_world_sizes(sweep.runs)
    explicit = settings.baseline is not None or settings.metrics is not None
    study, keys, common, labels, configs = label_sweep(sweep, settings.names, explicit, problems)
    cond_runs = sweep.conditions()
    usable = {c: [r for r in runs if r.ok] for c, runs in cond_runs.items()}
    usable_conds = [c for c, runs in usable.items() if runs]
    baseline, rule = choose_baseline(usable_conds, settings.baseline, labels)
    regimes = sorted({name for runs in usable.values() for r in runs for name, ev in r.evals.items() if ev.usable})
    settings = _resolved(settings, study, usable, regimes, problems)
    baseline_for, families = assign_baselines(
        configs, usable_conds, regimes, None if settings.baseline else study, baseline, labels, problems)
    notes = [ONE_CONDITION] if baseline is not None and len(usable_conds) < 2 else []
    return Conditions(sweep=sweep, settings=settings, study=study, labels=labels, keys=keys, common=common,
                      usable=usable, regimes=regimes, baseline=baseline, baseline_rule=rule,
                      baseline_for=baseline_for, families=families, inventory=inventory_table(sweep, labels),
                      table=count_table(cond_runs, sweep, labels), problems=problems, notes=notes)


def mixed_world_sizes(runs: Sequence[Run]) -> list[str]:
    """One problem line per arm whose seeds ran at different data-parallel world sizes: under DDP the batch
    is the per-device batch x the world size, so they are not seeds of one recipe. Their conditions differ
    by `effective_batch=` (ablate.stats.read.runs.split_overrides) and are never pooled; a run that records no
    layout (from before it was recorded) counts as one device."""
    arms: dict[tuple[str, ...], dict[tuple[int, int | None], list[str]]] = {}
    for run in runs:
        layout = data_parallel(run.status) or (1, None)
        arm = tuple(c for c in run.condition if not c.startswith(f"{EFFECTIVE_BATCH}="))
        arms.setdefault(arm, {}).setdefault(layout, []).append(f"seed {run.seed}" if run.seed else run.rel)
    problems = []
    for arm, by_layout in arms.items():
        if len({world for world, _ in by_layout}) > 1:
            shown = "; ".join(f"{world} process{'es' * (world > 1)} (effective batch {batch or '?'}): "
                              f"{', '.join(seeds[:6])}{' ...' if len(seeds) > 6 else ''}"
                              for (world, batch), seeds in sorted(by_layout.items(), key=lambda kv: kv[0][0]))
            problems.append(f"{condition_label(arm)} ran at different data-parallel world sizes ({shown}): the "
                            f"effective batch is the per-device batch x the world size, so these are not seeds of "
                            f"one recipe and are not pooled (their conditions differ by {EFFECTIVE_BATCH}=); run "
                            f"every seed of an arm at one world size")
    return problems


def _resolved(settings: Settings, study: Study | None, usable: dict, regimes: Sequence[str],
              problems: list[str]) -> Settings:
    """The settings with the compared metrics (--metric, else the study's found in some run, else pass@1)
    and the effect to plan for (--effect, else the study's, else DEFAULT_EFFECT)."""
    if settings.metrics is None:
        metrics = _study_metrics(study, usable, regimes, problems)
    else:
        metrics = tuple(settings.metrics)
        _check_requested_metrics(metrics, usable, regimes)
    effect = settings.effect or (study.effect if study is not None else None) or DEFAULT_EFFECT
    return dataclasses.replace(settings, metrics=metrics, effect=effect)


def _study_metrics(study: Study | None, usable: dict, regimes: Sequence[str], problems: list[str]):
    if study is None or not study.metrics:
        return DEFAULT_METRICS
    have = set(available_metrics(usable, regimes))
    missing = [m for m in study.metrics if m not in have]
    if missing and regimes:
        problems.append(f"study {study.name}: metric(s) {', '.join(missing)} not found in any run; not compared")
    kept = tuple(m for m in study.metrics if m in have)
    return kept or DEFAULT_METRICS


def _check_requested_metrics(metrics: Sequence[str], usable: dict, regimes: Sequence[str]) -> None:
    if not regimes:
        return
    have = available_metrics(usable, regimes)
    unknown = [m for m in metrics if m not in have]
    if unknown:
        raise StatsInputError(f"--metric {', '.join(unknown)}: not found in any run; available: "
                              + ", ".join(have))


INVENTORY_COLUMNS = ["run", "path", "condition", "overrides", "seed", "state", "outcome", "reason", "regimes",
                     "issues", "warnings"]
COUNT_COLUMNS = ["condition", "overrides", "runs", "ok", "failed", "running", "missing", "seeds_ok"]


def inventory_table(sweep: Sweep, labels: dict) -> pd.DataFrame:
    """runs.csv: every run directory and every job that never started, with its outcome and why."""
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
    return pd.DataFrame(rows, columns=INVENTORY_COLUMNS)


def count_table(cond_runs: dict, sweep: Sweep, labels: dict) -> pd.DataFrame:
    """Per condition (the sweep's order): its runs by outcome, never-started jobs counted as missing."""
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
    return pd.DataFrame(rows, columns=COUNT_COLUMNS)


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



def condition_configs(cond_runs: dict) -> dict:
    """condition -> the composed config of its first run that has one (seeds share the rest)."""
    return {c: next((r.config for r in runs if r.config is not None), None) for c, runs in cond_runs.items()}


def assign_baselines(configs: dict, usable_conds, regimes, study: Study | None, global_base, labels,
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


def label_sweep(sweep, names: Sequence[str], explicit: bool, problems: list[str]):
    """(study, keys, common, labels, configs) of a loaded sweep: the study its runs declare, each
    condition's unnamed label (`keys`), the overrides all share, its shown label, its config."""
    cond_runs = sweep.conditions()
    keys, common = display_labels(list(cond_runs))
    study = sweep_study(sweep.runs, explicit, problems)
    configs = condition_configs(cond_runs)
    return study, keys, common, name_conditions(keys, configs, study, names, problems), configs


def usable_regimes(sweep) -> list[str]:
    return sorted({name for r in sweep.runs if r.ok for name, ev in r.evals.items() if ev.usable})
