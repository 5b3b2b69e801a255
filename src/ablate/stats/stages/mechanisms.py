"""Declared mechanism checks: what each arm's runs did, per run, described and never decided.

A study declares them beside its claims, each a name and a metric of the claims' grammar
(ablate.stats.values.table: a training-curve summary `AGG:COLUMN[@START:END]` or an evaluation metric):

    study:
      mechanisms:
        level_q1: "mean:curriculum/level@0:31"        # the controller's level, first quarter
        level_changes_q4: "changes:curriculum/level@96:"   # share of steps the level changed
        final_val: "final:val/pass@1"

`ablate.stats` computes every one for every run through the same loader and values table the claims
read, writes them per run to mechanisms.csv (run, condition, seed, one column a mechanism), and
renders report.md's Mechanisms section: per condition, mean [min, max] over its runs (n). The same
table renders in docs/findings.md (`<!-- mechanisms:STUDY -->`): no script computes them by hand.
`describe_mechanisms` is the pipeline's mechanisms stage and returns them as `Mechanisms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import pandas as pd
import yaml

import ablate.config
from ablate.config.scale import base_name

from ablate.stats.claims.study import declared_mechanisms
from ablate.stats.values.table import sweep_values

if TYPE_CHECKING:
    from ablate.stats.read.runs import Sweep


@dataclass(frozen=True)
class Mechanisms:
    """The study's declared mechanisms, per run."""

    table: pd.DataFrame | None  # mechanisms.csv (see mechanism_table); None when none is declared
    metrics: dict[str, str]  # name -> metric of each column of `table` (report.md's legend): the runs'
    #                          study block's, else today's preset's (then `notes` says so)
    problems: list[str]  # malformed declarations
    notes: list[str]  # where today's preset stood in for a block that declares none


def describe_mechanisms(sweep: Sweep, study, labels: dict, regimes: Sequence[str]) -> Mechanisms:
    """The mechanisms stage: the runs' study block's mechanisms, else today's preset of the study's name
    (a note says so: mechanisms describe, so this is no data problem). `study`: the sweep's
    ablate.stats.claims.study.Study or None (its `block` and `name` are read); `labels`: condition -> its
    label (Conditions.labels); `regimes`: the eval regimes an evaluation metric is read in."""
    problems: list[str] = []
    notes: list[str] = []
    if study is None:
        return Mechanisms(None, {}, problems, notes)
    declared = declared_mechanisms(study.block, problems)
    used = declared or preset_mechanisms(study.name, notes)
    table = mechanism_table(sweep_values(sweep, labels, list(used.values()), regimes), used) if used else None
    return Mechanisms(table, used, problems, notes)


def mechanism_table(values: pd.DataFrame, mechanisms: Mapping[str, str]) -> pd.DataFrame:
    """Per run: run, condition, seed, then one column per mechanism (NaN where a run lacks it).
    `values`: the tidy per-run values table (ablate.stats.values.table.VALUE_COLUMNS) holding their metrics."""
    base = values.drop_duplicates("run")[["run", "condition", "seed"]].set_index("run")
    for name, metric in mechanisms.items():
        rows = values[values["metric"] == metric].drop_duplicates("run").set_index("run")["value"]
        base[name] = rows.reindex(base.index)
    return base.reset_index()


def per_condition(frame: pd.DataFrame, keys: Sequence[str] = ("condition",)) -> str:
    """The markdown table: per condition (and regime, where given), mean [min, max] over its runs (n)."""
    keys = list(keys)
    columns = [c for c in frame.columns if c not in ("run", "seed", "regime", *keys)
               and pd.api.types.is_numeric_dtype(frame[c]) and frame[c].notna().any()]
    rows = [f"| {' | '.join(keys)} | n | " + " | ".join(f"`{c}`" for c in columns) + " |",
            "|---" * (len(keys) + 1) + "|" + "---|" * len(columns)]
    for cond, group in frame.groupby(keys, sort=False):
        cells = []
        for c in columns:
            v = group[c].dropna()
            cells.append("–" if v.empty else f"{v.mean():.3g} [{v.min():.3g}, {v.max():.3g}]")
        cond = cond if isinstance(cond, tuple) else (cond,)
        rows.append(f"| {' | '.join(map(str, cond))} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def mechanisms_markdown(m: Mechanisms) -> list[str]:
    """report.md's Mechanisms section: every mechanism mechanisms.csv holds, whether the runs' study block
    or today's preset declared it (its note then says so); empty when neither declares any."""
    if m.table is None or m.table.empty or not m.metrics:
        return []
    legend = "; ".join(f"`{name}` = `{metric}`" for name, metric in m.metrics.items())
    source = "Declared by today's preset" if m.notes else "Declared in the study (`study.mechanisms`)"
    return ["## Mechanisms", "",
            f"{source}, per run in `mechanisms.csv`; they describe what the arms did and decide nothing. "
            "Per condition: mean [min, max] over its runs (n).", "",
            *(f"_{note}._\n" for note in m.notes), per_condition(m.table), legend, ""]


def preset_mechanisms(study_name: str, notes: list[str]) -> dict[str, str]:
    """The mechanisms today's preset of that name declares, for runs whose study block predates the
    declaration (they describe, so declaring them later changes no verdict; the report says so)."""
    path = ablate.config.CONF_DIR / "experiment" / f"{base_name(study_name)}.yaml"  # a scaled study: its preset's
    if not path.is_file():
        return {}
    try:
        block = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("study") or {}
    except yaml.YAMLError:
        return {}
    found = declared_mechanisms(block, [])
    if found:
        notes.append(f"Mechanisms: the runs' study block declares none; described with the ones "
                     f"conf/experiment/{study_name}.yaml declares today ({', '.join(found)})")
    return found
