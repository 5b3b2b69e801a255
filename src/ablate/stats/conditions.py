"""Runs into conditions: labels (the overrides that distinguish a condition, or a name), the
baseline each condition is compared with (a study's rules, --baseline, or the fallback rules)."""

from __future__ import annotations

from typing import Sequence

from ablate.stats.runs import StatsInputError, condition_label, normalise_override
from ablate.stats.study import Study, matches, sweep_study

BASELINE_VALUES = {"none", "off", "uniform", "baseline", "default", "false", "null", "no"}


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
