"""`python -m ablate.stats RUNS.csv --study STUDY.yaml`: the report of an external study.

The table's runs go through ablate.stats' own stages (ablate.stats.stages.analysis): conditions, labels, baselines
and the machines check (`group_conditions`), training curves and steps to reach (`training_curves`), the
claims (ablate.external.decide: the same engine and registration standing), and the same writer
(`write_report`). The table's metrics have no prompts, so their summary is a t-interval over seeds per
condition (summary.csv's rows in regime `runs`), the seed-level description ablate gives every run-level
number; comparisons over prompts need per-prompt data and are left out (a note says so)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ablate.external.decide import decide_table
from ablate.external.prompts import attach_prompts
from ablate.external.tidy import RUNS_REGIME, TidyError, TidyRuns, read_table, tidy_runs
from ablate.stats.stages.analysis import Analysis
from ablate.stats.values.blocks import available_metrics
from ablate.stats.stages.compare import compare
from ablate.stats.stages.conditions import group_conditions, label_sweep
from ablate.stats.stages.curves import training_curves
from ablate.stats.claims.engine import components
from ablate.stats.claims.study import check_study_block
from ablate.stats.maths.intervals import t_interval
from ablate.stats.stages.mechanisms import Mechanisms
from ablate.stats.values.reach import reach_metric
from ablate.stats.stages.settings import Settings
from ablate.stats.stages.summary import SUMMARY_COLUMNS, summarize
from ablate.stats.values.table import AGGREGATES

_CURVE = re.compile(rf"^(?:{'|'.join(AGGREGATES)}):(.+?)(?:@-?\d*:-?\d*)?$")  # AGG:COLUMN[@START:END]
NO_PROMPTS = ("The table has run-level metrics only: each condition is described by its seeds' mean and t-interval "
              "(regime `runs`); the claims table decides. Comparisons over prompts need per-prompt results.")


def load_study(path: Path) -> dict:
    """The `study:` block of STUDY.yaml (a preset's block, or a file holding `study:`), checked as a preset's
    is at start-up: every problem one line (TidyError)."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TidyError([f"--study {path}: no such file"]) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TidyError([f"--study {path}: unreadable YAML ({' '.join(str(exc).split())[:200]})"]) from None
    block = raw.get("study", raw) if isinstance(raw, dict) else None
    if not isinstance(block, dict) or not block.get("name"):
        raise TidyError([f"--study {path}: not a study block (a mapping with at least `name`, as a preset's "
                         f"`study:`; docs/any_runs.md)"])
    problems = check_study_block(block)
    if problems:
        raise TidyError([f"--study {path}: {p}" for p in problems])
    return block


def _metric_columns(metric: str) -> list[str]:
    """The table columns a claim's metric reads: `A - B` both, `AGG:COL@..` COL, `reach:COL>=V` COL."""
    out = []
    for part in components(metric):
        target = reach_metric(part)
        curve = _CURVE.match(part)
        out.append(target.column if target is not None else curve.group(1) if curve else part)
    return out


def claim_problems(tr: TidyRuns, block: dict, labels: dict, source: str) -> list[str]:
    """One line per claim (or precondition) naming a condition or a metric the table lacks."""
    have = set(labels.values())
    per_prompt = set(prompt_metric_names(tr))
    lines = []
    for claim in block.get("claims") or []:
        if not isinstance(claim, dict):
            continue
        cid = claim.get("id", "?")
        gates = claim.get("precondition")
        gates = [g for g in (gates if isinstance(gates, list) else [gates]) if isinstance(g, dict)]
        for role, cond in [("condition", claim.get("condition")), ("baseline", claim.get("baseline")),
                           *[("precondition condition", g.get("condition")) for g in gates]]:
            if isinstance(cond, str) and cond not in have:
                lines.append(f"claim {cid}: its {role} {cond!r} is no condition of {source} "
                             f"(conditions: {'; '.join(sorted(have))})")
        for metric in [claim.get("metric"), *[g.get("metric") for g in gates]]:
            if not isinstance(metric, str):
                continue
            lacking = [c for c in _metric_columns(metric) if c not in tr.metric_columns and c not in per_prompt]
            if lacking:
                lines.append(f"claim {cid}: metric {metric!r} reads {', '.join(lacking)}, which {source} lacks as a "
                             f"numeric column (metrics: {', '.join(tr.metric_columns) or 'none'})")
    return lines


def prompt_metric_names(tr: TidyRuns) -> list[str]:
    """The metrics the runs' per-prompt counts give (pass@1, ...; none without a per-prompt table)."""
    runs = [r for r in tr.sweep.runs if r.evals]
    regimes = sorted({name for r in runs for name in r.evals})
    return available_metrics({(): runs}, regimes) if runs else []


def read_runs(runs: Path, study_path: Path, conditions: list[str] | None = None,
              prompts: Path | None = None) -> tuple[TidyRuns, dict]:
    """(the table's runs, the study block), or TidyError naming every problem that stops the report.
    `prompts`: the optional per-prompt table (ablate.external.prompts)."""
    block = load_study(study_path)
    tr = tidy_runs(read_table(runs), block, runs, conditions)
    if prompts is not None:
        attach_prompts(tr, Path(prompts))
    problems: list[str] = []
    _, _, _, labels, _ = label_sweep(tr.sweep, (), False, problems)
    lines = claim_problems(tr, block, labels, Path(runs).name)
    if lines:
        raise TidyError(lines)
    return tr, block


def run_level_summary(tr: TidyRuns, labels: dict, order: list, confidence: float) -> pd.DataFrame:
    """summary.csv's rows of the table's metrics: per run as given, per condition the mean over seeds
    with a t-interval over seeds (the unit of replication)."""
    rows = []
    by_cond: dict = {}
    for run in tr.sweep.runs:
        by_cond.setdefault(run.condition, []).append(run)
    for cond in order:
        runs, label = by_cond.get(cond, []), labels[cond]
        for metric in tr.metric_columns:
            vals = np.asarray([tr.values[r.rel].get(metric, np.nan) for r in runs], dtype=np.float64)
            for run, v in zip(runs, vals):
                if np.isfinite(v):
                    rows.append(_row("run", label, run.seed, run.rel, metric, v, np.nan, 1, np.nan, np.nan, "as given"))
            ok = vals[np.isfinite(vals)]
            if ok.size:
                lo, hi = t_interval(ok, confidence) if ok.size > 1 else (np.nan, np.nan)
                rows.append(_row("condition", label, "", "", metric, ok.mean(), ok.std(ddof=1) if ok.size > 1 else np.nan,
                                 ok.size, lo, hi, "t interval over seeds" if ok.size > 1 else "one seed: no interval"))
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _row(level, label, seed, run, metric, value, sd, n, lo, hi, method) -> dict:
    return {"level": level, "regime": RUNS_REGIME, "condition": label, "seed": seed, "run": run, "metric": metric,
            "value": float(value), "sd_seeds": float(sd), "n_seeds": int(n), "ci_low": float(lo), "ci_high": float(hi),
            "ci_method": method, "wilson_low": np.nan, "wilson_high": np.nan, "reported": np.nan, "n_prompts": 0,
            "n_samples": 0}


def analyze_table(tr: TidyRuns, settings: Settings) -> Analysis:
    """Every stage of the report on the table's runs (see the module's docstring)."""
    conditions = group_conditions(tr.sweep, settings)
    study = conditions.study
    wanted = list(settings.metrics) if settings.metrics else list(study.metrics) if study and study.metrics else []
    have = [*tr.metric_columns, *prompt_metric_names(tr)]
    metrics = tuple(m for m in wanted if m in have) or tuple(have[:1]) or ("pass@1",)
    problems = [*conditions.problems, *tr.problems]
    problems += [f"study {study.name if study else ''}: metric {m} is no column of the table; not described"
                 for m in wanted if m not in have]
    conditions = dataclasses.replace(conditions, settings=dataclasses.replace(conditions.settings, metrics=metrics),
                                     problems=problems)
    prompt_summary = summarize(conditions)  # the regimes of the per-prompt table, if any (else empty)
    conditions = dataclasses.replace(conditions, regimes=[*conditions.regimes, RUNS_REGIME])
    table = pd.concat([prompt_summary.table,
                       run_level_summary(tr, conditions.labels, list(conditions.labels), settings.confidence)],
                      ignore_index=True)
    summary = dataclasses.replace(prompt_summary, table=table)
    comparisons = compare(conditions, summary)
    if not prompt_summary.groups:
        comparisons.notes.append(NO_PROMPTS)
    claims = None
    if study is not None and study.declared.claims:
        s = conditions.settings
        claims = decide_table(tr, study, conditions.labels, s.effect, s.registration, s.report_dir)
    return Analysis(conditions=conditions, summary=summary, comparisons=comparisons,
                    curves=training_curves(conditions), claims=claims, mechanisms=Mechanisms(None, {}, [], []))
