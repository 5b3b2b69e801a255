"""From a loaded sweep to tables, stage by stage. Each stage is a function of the sweep and the stages
before it, and returns its own small result; `Analysis` holds them side by side, and each renderer
takes the stages it draws (report.md and report.json draw them all):

    group_conditions(sweep, settings) -> Conditions   labels, usable runs, baselines, runs.csv
    summarize(conditions)              -> Summary      summary.csv, robust.csv, performance profiles
    compare(conditions, summary)       -> Comparisons  comparisons.csv, power.csv
    training_curves(conditions)        -> Curves       curves.csv.gz, reach.csv
    decide_claims(conditions)          -> ClaimsResult claims.csv, claims_looks.csv (ablate.stats.claims.engine)
    describe_mechanisms(sweep, ...)    -> Mechanisms   mechanisms.csv
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.stats.claims.engine import ClaimsResult, sweep_claims
from ablate.stats.claims.standing import sweep_decided
from ablate.stats.read.runs import Sweep
from ablate.stats.stages.compare import Comparisons, compare
from ablate.stats.stages.conditions import Conditions, group_conditions, label_sweep, usable_regimes
from ablate.stats.stages.curves import Curves, training_curves
from ablate.stats.stages.mechanisms import Mechanisms, describe_mechanisms
from ablate.stats.stages.settings import Settings
from ablate.stats.stages.summary import Summary, summarize


@dataclass(frozen=True)
class Analysis:
    """Every stage's result of one sweep."""

    conditions: Conditions
    summary: Summary
    comparisons: Comparisons
    curves: Curves
    claims: ClaimsResult | None  # None: the study declares no claims
    mechanisms: Mechanisms

    @property
    def problems(self) -> list[str]:
        """Every stage's data problems, in the order the stages ran."""
        claims = self.claims.problems if self.claims is not None else []
        return [*self.conditions.problems, *self.summary.problems, *self.comparisons.problems, *claims,
                *self.mechanisms.problems]

    @property
    def notes(self) -> list[str]:
        """What was not compared or reached and why, in the report's order: the comparisons', the
        curves', then a sweep of one condition (nothing to compare), then the mechanisms'."""
        return [*self.comparisons.notes, *self.curves.notes, *self.conditions.notes, *self.mechanisms.notes]


def analyze(sweep: Sweep, settings: Settings) -> Analysis:
    """Every stage of a loaded sweep under the command's settings, in pipeline order."""
    conditions = group_conditions(sweep, settings)
    summary = summarize(conditions)
    return Analysis(conditions=conditions, summary=summary, comparisons=compare(conditions, summary),
                    curves=training_curves(conditions), claims=decide_claims(conditions),
                    mechanisms=describe_mechanisms(sweep, conditions.study, conditions.labels, conditions.regimes))


def decide_claims(c: Conditions) -> ClaimsResult | None:
    """The study's declared claims decided on this sweep, under its registration if one is found (None
    when it declares none), through ablate.stats.claims.engine.sweep_claims as the calibration harness decides."""
    if c.study is None or not c.study.declared.claims:
        return None
    s = c.settings
    return sweep_decided(c.sweep, c.study, c.labels, c.regimes, s.effect, s.registration, s.report_dir)


def claims_of(sweep, names=(), explicit: bool = False, effect: float | None = None) -> ClaimsResult | None:
    """The study's claims for a loaded sweep, without the rest of the report: what the calibration
    harness runs (analyze() calls sweep_claims with the same study, labels and regimes)."""
    problems: list[str] = []
    study, _, _, labels, _ = label_sweep(sweep, names, explicit, problems)
    if study is None or not study.declared.claims:
        return None
    result = sweep_claims(sweep, study.declared, labels, usable_regimes(sweep),
                          effect or study.effect or 0.03)
    result.problems[:0] = problems
    return result
