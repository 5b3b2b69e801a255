"""The `study:` block a study preset writes into every run's composed config (`.hydra/config.yaml`):
the question, the deciding metrics, the effect it wants to detect, and which baseline each condition
is compared with. Runs without the block (`study: null` or no key) are reported as before."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ablate.stats.claims.claim_types import CLAIM_TYPES
from ablate.stats.claims.declared import Declared, parse_declared
from ablate.stats.maths.level import DEFAULT_TEST, first_look_problems
from ablate.stats.read.runs import Run, StatsInputError
from ablate.stats.values.table import is_curve_metric

MECHANISMS = "mechanisms"  # the study key of the declared mechanism checks (ablate.stats.stages.mechanisms)
_MISSING = object()
_YAML_TRUE = {"true", "yes", "on"}
_YAML_FALSE = {"false", "no", "off"}


@dataclass
class Rule:
    """Conditions whose config matches `family` are compared with the condition matching `baseline`."""

    family: dict[str, Any]
    baseline: dict[str, Any]
    regime: str | None = None

    def describe(self) -> str:
        text = ", ".join(f"{k}={_show(v)}" for k, v in self.family.items()) or "(every condition)"
        return text + (f" [regime `{self.regime}`]" if self.regime else "")


@dataclass
class Study:
    name: str
    question: str = ""
    metrics: tuple[str, ...] = ()
    effect: float | None = None
    rules: list[Rule] = field(default_factory=list)
    names: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> config match
    declared: Declared = field(default_factory=Declared)  # claims and seed plan (ablate.stats.claims.declared)
    block: dict = field(default_factory=dict)  # the block as the runs carry it (what a registration is compared with)


def _show(v) -> str:
    return "null" if v is None else str(v)


def lookup(cfg: Mapping | None, dotted: str):
    """The node at a dotted path (`stage.name`) of a config, or _MISSING."""
    node: Any = cfg
    for part in str(dotted).split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _scalar(x):
    # YAML 1.1 reads an unquoted `on`/`off` as a boolean; a rule written `tool.name: on` must still
    # match a config whose OmegaConf dump quoted it ('on'), so both sides go through the same table.
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, (int, float)):
        return ("num", float(x))
    text = str(x).strip()
    if text.lower() in _YAML_TRUE | _YAML_FALSE:
        return ("bool", text.lower() in _YAML_TRUE)
    try:
        return ("num", float(text))
    except ValueError:
        return ("str", text)


def same(want, have) -> bool:
    """Does config value `have` satisfy rule value `want`? null matches a missing or null node."""
    if want is None:
        return have is _MISSING or have is None
    if have is _MISSING or have is None:
        return False
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(same(v, lookup(have, k)) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(have, (list, tuple)) and len(want) == len(have)
                and all(same(w, h) for w, h in zip(want, have)))
    if isinstance(have, (Mapping, list, tuple)):
        return False
    return _scalar(want) == _scalar(have)


def matches(cfg: Mapping | None, where: Mapping) -> bool:
    if cfg is None:
        return False
    return all(same(v, lookup(cfg, k)) for k, v in where.items())


def parse_study(block: Mapping, problems: list[str]) -> Study:
    """A Study from a config's `study:` mapping; malformed parts are named in `problems` and skipped."""
    name = str(block.get("name") or "unnamed study")
    metrics = block.get("metrics") or []
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",")]
    if not isinstance(metrics, (list, tuple)):
        problems.append(f"study {name}: `metrics` is not a list; ignored")
        metrics = []
    effect = block.get("effect")
    if effect is not None:
        try:
            effect = float(effect)
        except (TypeError, ValueError):
            effect = math.nan
        if not (math.isfinite(effect) and effect > 0):
            problems.append(f"study {name}: `effect` {block.get('effect')!r} is not a positive number; ignored")
            effect = None
    rules = []
    for i, raw in enumerate(block.get("baselines") or [], 1):
        family = raw.get("family") if isinstance(raw, Mapping) else None
        base = raw.get("baseline") if isinstance(raw, Mapping) else None
        if family is None:
            family = {}
        if not isinstance(family, Mapping) or not isinstance(base, Mapping) or not base:
            problems.append(f"study {name}: baselines entry {i} needs `family` and `baseline` mappings; ignored")
            continue
        regime = raw.get("regime")
        rules.append(Rule(dict(family), dict(base), None if regime is None else str(regime)))
    names = block.get("names") or {}
    if not isinstance(names, Mapping) or not all(isinstance(w, Mapping) and w for w in names.values()):
        problems.append(f"study {name}: `names` must map each label to a non-empty config match; ignored")
        names = {}
    declared_problems: list[str] = []
    declared = parse_declared(block, declared_problems)
    problems.extend(f"study {name}: {p}" for p in declared_problems)
    return Study(name, str(block.get("question") or ""), tuple(str(m) for m in metrics if str(m).strip()),
                 effect, rules, {str(label): dict(where) for label, where in names.items()}, declared, dict(block))


def sweep_study(runs: Sequence[Run], explicit: bool, problems: list[str]) -> Study | None:
    """The one study the sweep's runs belong to, or None.

    Runs of different studies have different deciding metrics and baselines, so pooling them is an
    error unless the user said what to compare (`explicit`: --baseline or --metric given); then the
    study blocks are ignored. Runs without a block don't count against a study.
    """
    by_name: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.rel):
        if run.study is not None:
            by_name.setdefault(str(run.study.get("name") or "unnamed study"), []).append(run)
    if not by_name:
        return None
    if len(by_name) > 1:
        listing = "; ".join(f"{name} ({len(rs)} run(s), e.g. {rs[0].rel})" for name, rs in by_name.items())
        if not explicit:
            raise StatsInputError(
                f"the runs belong to different studies: {listing}. Report each study's sweep separately, "
                "or pass --baseline and/or --metric to compare them anyway (the study blocks are then ignored)")
        problems.append(f"runs belong to different studies ({listing}); study blocks ignored")
        return None
    ((name, members),) = by_name.items()
    first = members[0].study
    differing = [r.rel for r in members[1:] if r.study != first]
    if differing:
        problems.append(f"study {name}: the study block differs between runs (e.g. {members[0].rel} vs "
                        f"{differing[0]}); using {members[0].rel}'s")
    return parse_study(first, problems)


def check_study_block(block: Mapping | None) -> list[str]:
    """Problems of a study block's claims and plan (empty when fine): for start-up validation."""
    problems: list[str] = []
    declared = parse_declared(block, problems)
    declared_mechanisms(block, problems)
    if declared.test == "randomization":
        problems += [f"claim {c.id!r}: type {c.kind} has no randomization test, which `test: randomization` "
                     "decides with; declare `study.test: welch`, or give the type an `exact_p` (docs/extending.md)"
                     for c in declared.claims if c.in_family and c.baseline is not None
                     and not CLAIM_TYPES[c.kind].has_exact_test]
    if not problems:  # refused before compute: a first look whose exact test cannot decide
        plan = declared.plan
        refused = first_look_problems([c for c in declared.claims if c.in_family], plan.looks, plan.spending,
                                      declared.shares(),
                                      lambda c, n: CLAIM_TYPES[c.kind].floor(c, n, n, declared.test))
        if refused and not (block or {}).get("test"):
            refused = [f"{p} (the study declares no `test`, so the exact guard of `test: {DEFAULT_TEST}` "
                       f"decides; `study.test: welch` decides with Welch's t alone, whose level at these seeds "
                       f"docs/stats.md measures)" for p in refused]
        problems += refused
    return problems


def declared_mechanisms(block: Mapping | None, problems: list[str]) -> dict[str, str]:
    """name -> metric of the study's `mechanisms:`; malformed entries named in `problems`."""
    raw = (block or {}).get(MECHANISMS) or {}
    if not isinstance(raw, Mapping):
        problems.append(f"{MECHANISMS} must map a name to a metric "
                        f"(e.g. level_q1: \"mean:curriculum/level@0:31\"), got {raw!r}")
        return {}
    out = {}
    for name, metric in raw.items():
        if not isinstance(metric, str) or not metric.strip():
            problems.append(f"{MECHANISMS}.{name}: needs a metric string, got {metric!r}")
        elif ":" in metric and not is_curve_metric(metric):
            problems.append(f"{MECHANISMS}.{name}: {metric!r} is not a curve metric AGG:COLUMN[@START:END] "
                            "(AGG one of final, mean, max, min, auc, slope, changes) nor an evaluation metric")
        else:
            out[str(name)] = metric.strip()
    return out
