"""An external study's claims, decided by ablate.stats' own engine on the table's runs.

The per-run values table (ablate.stats.values.VALUE_COLUMNS) is built from the tidy runs: a plain metric
is the run's value in the table (its last logged value with `step`), `AGG:COLUMN[@START:END]` and
`reach:COLUMN>=VALUE` read the run's curve as they read an ablate run's metrics.csv. Then the same
registration standing (ablate.stats.claims.standing.decide) and claims engine (ablate.stats.claims.engine.evaluate) as
`python -m ablate.stats` on run directories. Last, a verdict whose two arms ran on different machines,
torch versions, or in separate time spans (every run of one arm started before any run of the other) is
refused: the arm is aliased with where or when it ran, so no verdict can say which one made the difference.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from ablate.external.tidy import RUNS_REGIME, TidyRuns
from ablate.stats.claims.aliasing import places_by_label, refuse_aliased
from ablate.stats.claims.engine import ClaimsResult, claim_metrics, components, evaluate, reach_thresholds
from ablate.stats.values.reach import reach_metric
from ablate.stats.claims.registration import find_registration, read_registration
from ablate.stats.claims.standing import decide, fingerprint_problems, first_start
from ablate.stats.values.table import CURVE_REGIME, VALUE_COLUMNS, curve_value, eval_values, is_curve_metric, reach_values


def on_table_columns(declared, columns) -> object:
    """`declared` with each claim on the table's own columns read in regime `runs`: a table has no eval
    regime, so the claims table shows the same neutral label as the summary (not a preset's default
    `no_tool`). Claims on per-prompt metrics keep theirs, and so do their preconditions."""
    columns = set(columns)

    def own(metric) -> bool:
        return isinstance(metric, str) and all(part in columns for part in components(metric))

    def retag(claim):
        if not own(claim.metric):
            return claim
        gates = {g: dataclasses.replace(g, regime=claim.regime) for g in claim.gates
                 if g.metric and g.regime is None and not own(g.metric)}
        return dataclasses.replace(claim, regime=RUNS_REGIME, baseline_regime=None,
                                   precondition=gates.get(claim.precondition, claim.precondition),
                                   also=tuple(gates.get(g, g) for g in claim.also))

    return dataclasses.replace(declared, claims=[retag(c) for c in declared.claims])


def claim_regimes(declared) -> list[str]:
    """The eval regimes the claims read a plain metric in (a table has none: its values serve each)."""
    return sorted({r for c in declared.claims for r in (c.regime, c.baseline_regime) if r})


def tidy_values(tr: TidyRuns, labels: dict, metrics, regimes) -> pd.DataFrame:
    """The tidy table of `metrics` for every run: plain metrics once per regime, curve metrics under `train`."""
    rows = []
    for run in tr.sweep.runs:
        base = {"run": run.rel, "batch": tr.batches.get(run.rel, 0), "condition": labels.get(run.condition, run.label),
                "seed": run.seed}
        for metric in metrics:
            if is_curve_metric(metric):
                rows.append({**base, "regime": CURVE_REGIME, "metric": metric,
                             "value": curve_value(run.metrics, metric)})
                continue
            value = tr.values.get(run.rel, {}).get(metric)
            for regime in regimes:
                ev = run.evals.get(regime)  # a metric of the per-prompt table (pass@1, ...), as ablate computes it
                from_prompts = eval_values(ev.prompts, [metric]).get(metric) if value is None and ev and ev.usable else None
                rows.append({**base, "regime": regime, "metric": metric,
                             "value": value if value is not None else from_prompts if from_prompts is not None else math.nan})
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def table_claims(tr: TidyRuns, declared, labels: dict, effect: float) -> ClaimsResult:
    """`declared` decided on the table's runs (ablate.stats.claims.engine.sweep_claims' steps, from the table)."""
    declared = on_table_columns(declared, tr.metric_columns)
    table = tidy_values(tr, labels, claim_metrics(declared), claim_regimes(declared))
    thresholds = reach_thresholds(declared, table)
    done: set[str] = set()
    for c in declared.claims:
        parsed = reach_metric(c.metric)
        if parsed is None or c.metric in done:
            continue
        done.add(c.metric)
        thr = thresholds.get(c.metric, math.nan) if parsed[2] == "baseline" else float(parsed[2])
        reached = reach_values(tr.sweep, labels, c.metric, thr)
        reached["batch"] = reached["run"].map(tr.batches).fillna(0).astype(int)
        table = pd.concat([table, reached], ignore_index=True)
    return evaluate(declared, table, effect)


def decide_table(tr: TidyRuns, study, labels: dict, effect: float, registration: Path | None = None,
                 report_dir: Path | None = None) -> ClaimsResult:
    """The study's claims on the table, under its registration if one is found (as ablate.stats decides),
    with the verdicts whose arms are aliased with a machine, a version or a time span refused."""
    path = find_registration(study.name, registration, report_dir)
    reg = read_registration(path) if path is not None else None
    started = first_start(r.status for r in tr.sweep.runs)
    result = decide(study.block, reg, started, lambda declared: table_claims(tr, declared, labels, effect))
    result.note = result.note.replace("python -m ablate.studies.register experiment=<study>",
                                      "python -m ablate.studies.register --study STUDY.yaml")
    result.problems += fingerprint_problems(tr.sweep.runs, reg)
    refuse_aliased(result, places_by_label(tr.sweep.runs, labels))
    return result


def arm_sizes(tr: TidyRuns, labels: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for run in tr.sweep.runs:
        label = labels.get(run.condition, run.label)
        out[label] = out.get(label, 0) + 1
    return out

