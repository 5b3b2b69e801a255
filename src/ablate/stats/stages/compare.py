"""Each condition against its baseline, per regime and compared metric: the recipe-level difference
(Welch's t-interval over per-seed values, the seed-level Welch test, Holm over this table's rows: the
claims' graphical procedure, ablate.stats.maths.multiplicity, with Holm's graph) and, as a labelled
model-level diagnostic that decides nothing, the paired prompt test of the trained models in hand.
Verdicts on a study's claims come from ablate.stats.claims.engine, not from this table. `compare` is the
pipeline's comparisons stage and returns them as `Comparisons`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ablate.stats.maths.intervals import rng_for
from ablate.stats.maths.multiplicity import holm_adjusted
from ablate.stats.maths.paired import paired_test, probability_of_improvement, seed_test
from ablate.stats.maths.power import POWER, mdd, pooled_sd, power_line, seeds_needed
from ablate.stats.maths.verdicts import welch
from ablate.stats.read.runs import condition_label

if TYPE_CHECKING:
    from ablate.stats.stages.conditions import Conditions
    from ablate.stats.stages.settings import Settings
    from ablate.stats.stages.summary import Summary

COMPARISON_COLUMNS = [
    "regime", "metric", "condition", "baseline", "n_seeds", "n_seeds_baseline", "mean", "mean_baseline",
    "diff", "diff_ci_low", "diff_ci_high", "n_shared_prompts", "paired_diff", "paired_ci_low",
    "paired_ci_high", "p_paired", "p_paired_holm", "significant_paired", "p_seed", "p_seed_holm",
    "significant_seed", "poi", "poi_ci_low", "poi_ci_high", "verdict", "note",
    "sd_seeds_pooled", "alpha_power", "mdd", "effect", "seeds_needed", "power_note",
]
POWER_COLUMNS = ["regime", "metric", "deciding", "condition", "baseline", "n_seeds", "n_seeds_baseline", "diff",
                 "sd_seeds_pooled", "alpha_power", "power", "mdd", "effect", "seeds_needed"]


@dataclass(frozen=True)
class Comparisons:
    """Each condition against its baseline, per regime and compared metric."""

    table: pd.DataFrame  # comparisons.csv (COMPARISON_COLUMNS): one row per (regime, metric, condition)
    power: pd.DataFrame | None  # power.csv (POWER_COLUMNS): every metric both sides have (--power), else None
    problems: list[str]
    notes: list[str]  # what was not compared, and why


def compare(c: Conditions, summary: Summary) -> Comparisons:
    """The comparisons stage: summary's groups against the baselines `c.baseline_for` names."""
    problems: list[str] = []
    notes: list[str] = []
    table = compare_all(summary.groups, c.baseline_for, c.labels, c.keys, c.regimes, c.settings, problems, notes)
    power = power_table(summary.groups, c.baseline_for, c.labels, c.regimes, c.settings, len(table)) \
        if c.settings.power else None
    return Comparisons(table=table, power=power, problems=problems, notes=notes)


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


def compare_all(groups, baseline_for, labels, keys, regimes, settings: Settings, problems, notes) -> pd.DataFrame:
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
            reject, adj = holm_adjusted(table[f"p_{test}"].to_numpy(dtype=float), s.alpha)
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


def _plan(table: pd.DataFrame, s, m: int) -> None:
    """MDD at the current seeds and seeds needed for the effect, at Holm's first step (alpha/m, the
    bar the smallest p-value must clear: conservative for the later steps)."""
    alpha = s.alpha / max(1, m)
    table["alpha_power"] = alpha
    table["effect"] = s.effect
    table["mdd"] = [mdd(sd, int(n1), int(n2), alpha) for sd, n1, n2
                    in zip(table["sd_seeds_pooled"], table["n_seeds"], table["n_seeds_baseline"])]
    table["seeds_needed"] = [seeds_needed(sd, s.effect, alpha) for sd in table["sd_seeds_pooled"]]


def power_table(groups, baseline_for, labels, regimes, s, m: int) -> pd.DataFrame:
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


def _compare_one(g, base, metric: str, labels, keys, s: Settings, problems) -> dict | None:
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
        row.update(mean=x.mean(), mean_baseline=y.mean(), diff=x.mean() - y.mean())
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
    if np.isfinite(st.p_value):  # Welch's interval: the same test as p_seed, at the report's confidence
        est = welch(x, y, s.confidence)
        row.update(diff_ci_low=est.low, diff_ci_high=est.high)
    if st.note and not np.isfinite(st.p_value):
        reasons.append(f"seed-level test: {st.note}")
    poi = probability_of_improvement(x, y, confidence=s.confidence, n_resamples=s.resamples,
                                     rng=rng_for(s.seed, "poi", rng_key))
    row.update(poi=poi.estimate, poi_ci_low=poi.low, poi_ci_high=poi.high)
    row["note"] = "; ".join(reasons)
    return row


def _shared_ids(blocks: Sequence) -> np.ndarray:
    common = set(blocks[0].ids.tolist())
    for b in blocks[1:]:
        common &= set(b.ids.tolist())
    return np.asarray(sorted(common), dtype=object)


def _per_prompt(blocks: Sequence, ids: np.ndarray, m: int):
    """Per-prompt numerator and denominator averaged over a condition's seeds."""
    num = np.zeros(len(ids))
    den = np.zeros(len(ids))
    for b in blocks:
        rows = b.rows_for(ids)
        num += b.num[rows, m]
        den += b.den[rows, m]
    return num / len(blocks), den / len(blocks)


def _verdict(r: dict, alpha: float) -> str:
    """The seed-level (recipe) reading; the paired prompt test is a model-level diagnostic and is
    named only as such."""
    def state(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return None
        return bool(x)

    ss, sp = state(r["significant_seed"]), state(r["significant_paired"])
    diff = r["diff"]
    direction = "higher" if diff > 0 else "lower" if diff < 0 else "equal"
    after = f"at α={alpha:g} after Holm correction over this table"
    if ss is None:
        return "no seed-level test (" + (r["note"] or "too few seeds") + ")"
    text = (f"{direction}; significant across seeds (Welch) {after}" if ss
            else f"not significant across seeds (Welch) {after}")
    if sp is not None and sp != ss:
        text += ("; the trained models differ on the shared prompts (paired test, model-level: decides nothing)"
                 if sp else "; the paired prompt test does not separate these trained models (model-level)")
    return text

