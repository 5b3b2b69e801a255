"""The `study:` block's schema: every key a study preset may write, its type, its default and what it means.

One dataclass per level of the block (the block, a claim, a precondition, the plan); a claim type adds its
own keys as the fields of its `Keys` dataclass (ablate.stats.claims.claim_types). The parsers
(ablate.stats.claims.declared and .study) read a block through these: a key no schema declares is named
with the known ones, a missing required key is named, and each number is read by its field's type.

Read when a block is parsed (at start-up by `ablate.train`, at analysis by `ablate.stats`), never composed
by Hydra: a composed schema would write every default into each run's config, and so change the
fingerprint of every study registered before it (docs/stats.md, "Registration").
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Mapping


def key(default: Any = None, help: str = "", *, positive: bool = False) -> Any:  # noqa: A002 - as argparse
    """A schema field: its default, one line of help, and for numbers whether they must be positive."""
    return field(default=default, metadata={"help": help, "positive": positive})


def required(help: str) -> Any:  # noqa: A002
    return field(metadata={"help": help, "positive": False})


@dataclass(frozen=True)
class StudyKeys:
    name: str = required("the study's name: its runs, its registration and its report carry it")
    question: str = key("", "the question the study answers (the report's first line)")
    paper: str = key("", "the paper the study re-runs")
    metrics: Any = key((), "the deciding metrics of the comparisons table (a list, or comma-separated)")
    effect: float = key(None, "the smallest effect of interest of the comparisons table", positive=True)
    baselines: Any = key((), "which baseline each family of conditions is compared with (family, baseline, regime)")
    names: Any = key(None, "label -> the config values that pick the condition (`RLOO static: {curriculum.name: ...}`)")
    claims: Any = key((), "the claims the study decides (a list of claims, ClaimKeys)")
    preconditions: Any = key(None, "name -> a mechanism check claims may rest on (PreconditionKeys)")
    plan: Any = key(None, "seeds per arm at each look and how alpha is spent (PlanKeys)")
    alpha: float = key(0.05, "the family's error rate", positive=True)
    test: str = key(None, "what decides a two-sample look: randomization | welch")
    multiplicity: Any = key(None, "bonferroni | holm | fixed_sequence | gatekeeping, or a graph (weights, transitions)")
    realisations: int = key(1, "how many times these claims are decided (re-runs): each at alpha / realisations")
    mechanisms: Any = key(None, "name -> a curve metric describing what each arm did (decides nothing)")


@dataclass(frozen=True)
class ClaimKeys:
    id: str = required("unique within the study")
    claim: str = required("the paper's sentence")
    metric: str = required("a summary metric, a curve summary, a reach, or `A - B`")
    condition: str = required("a condition label (study.names, else the overrides that tell it apart)")
    baseline: str = key(None, "the condition compared with; null: a one-sample claim against `against`")
    type: str = key("superiority", "a registered claim type (docs/stats.md, Claim types)")
    direction: Any = key("higher", "higher | lower")
    paper: float = key(None, "the paper's one-seed effect, shown beside the estimate")
    effect: float = key(None, "the smallest effect of interest (superiority; else |paper| stands in)", positive=True)
    margin: float = key(None, "the equivalence / non-inferiority margin, in the metric's units", positive=True)
    regime: str = key(None, "the evaluation regime (default no_tool)")
    baseline_regime: str = key(None, "the baseline's evaluation regime, where it differs")
    against: float = key(0.0, "a one-sample claim's null value (a constant no run measured; else `against_eval`)")
    against_eval: str = key(None, "a one-sample claim's bar read from a committed evaluation summary (its metric's "
                                  "value, its sampling error carried: stats/claims/measured_bar.py)")
    success: str = key(None, "`>=0.1`: the rate of seeds meeting it (success_rate decides on it)")
    precondition: Any = key(None, "a name of study.preconditions, a list of names, or an inline PreconditionKeys")
    requires: str = key(None, "a claim declared before it that must replicate first")
    role: str = key("", "primary | secondary: its place in a gatekeeping procedure")


@dataclass(frozen=True)
class PreconditionKeys:
    check: str = required("what the report prints")
    metric: str = key(None, "measured over `condition`'s seeds; none: declared untestable, with a `reason`")
    condition: str = key(None, "the condition measured (default: the claim's)")
    regime: str = key(None, "the evaluation regime (default: the claim's)")
    op: str = key(">=", ">= <= > <")
    threshold: float = key(None, "what the mean is compared with")
    reason: str = key("", "why the claim cannot be tested here (with no metric)")


@dataclass(frozen=True)
class PlanKeys:
    looks: Any = required("seeds per arm at each look, increasing, from 2: [5, 10, 20]")
    spending: str = key("obrien_fleming", "how alpha is spent over the looks: obrien_fleming | pocock")
    futility: float = key(None, "no further look for a claim needing more than this x the last look's seeds")


def names(*schemas: type) -> tuple[str, ...]:
    """The keys the schemas declare, in order, each once."""
    return tuple(dict.fromkeys(f.name for s in schemas for f in fields(s)))


def _required(f: Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def check_keys(raw: Mapping, schemas: tuple[type, ...], where: str, problems: list[str]) -> list[str]:
    """Names an unknown key (with the known ones) and returns the required keys `raw` lacks (empty or null).
    `where` prefixes the problem ("claim 'x'"; empty: the block itself)."""
    known = names(*schemas)
    unknown = sorted(set(map(str, raw)) - set(known))
    if unknown:
        problems.append(f"{where + ': ' if where else ''}unknown key(s) {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(known))}")
    return [f.name for s in schemas for f in fields(s) if _required(f) and not raw.get(f.name)]


def number(value: Any, where: str, problems: list[str], *, positive: bool = False) -> float:
    """A finite (positive) number, or NaN with the problem named; None is NaN (not given)."""
    if value is None:
        return math.nan
    try:
        out = float(value)
    except (TypeError, ValueError):
        problems.append(f"{where} must be a number, got {value!r}")
        return math.nan
    if not math.isfinite(out) or (positive and out <= 0):
        problems.append(f"{where} must be a {'positive ' if positive else ''}finite number, got {value!r}")
        return math.nan
    return out


def numbers(raw: Mapping, schema: type, where: str, problems: list[str]) -> dict[str, float]:
    """Every `float` field of `schema` read from `raw` (its default where absent): NaN where not given."""
    out = {}
    for f in fields(schema):
        if f.type in ("float", float):
            value = raw.get(f.name, None if _required(f) else f.default)
            out[f.name] = number(value, f"{where}: {f.name}", problems, positive=f.metadata.get("positive", False))
    return out
