"""A study's declared claims and seed plan: parsed and checked from the preset's `study:` block.

Declared before the runs (the preset is composed into every run's .hydra/config.yaml), so the report
cannot choose its claims after seeing the data. `check_study_block` (ablate.stats.claims.study) runs at
start-up (ablate.train) and names every malformed field; `ablate.stats` parses the same block and turns any
problem into a data problem rather than an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ablate.metrics import REGIME_NO_TOOL
from ablate.stats.claims.claim_types import CLAIM_TYPES
from ablate.stats.claims.measured_bar import read_bar
from ablate.stats.claims.method_checks import check_method, check_words
from ablate.stats.claims.schema import ClaimKeys, PlanKeys, PreconditionKeys, StudyKeys, check_keys, number, numbers
from ablate.stats.maths.level import DEFAULT_TEST, TESTS
from ablate.stats.maths.multiplicity import ROLES, Graph, parse_multiplicity
from ablate.stats.maths.sequential import SPENDING

OPS = (">=", "<=", ">", "<")
DEFAULT_REGIME = REGIME_NO_TOOL
DEFAULT_PLAN = (5, 10, 20)


@dataclass(frozen=True)
class Precondition:
    """A mechanism check that must hold for the claim to be testable: the mean over `condition`'s
    seeds of `metric` compared with `threshold` by `op`. Without a metric, the claim is declared
    untestable here and `reason` says why (e.g. the arm was not run)."""

    check: str
    metric: str | None = None
    condition: str | None = None  # None: the claim's condition
    regime: str | None = None  # None: the claim's regime
    op: str = ">="
    threshold: float = math.nan
    reason: str = ""


@dataclass(frozen=True)
class Claim:
    id: str
    text: str  # the paper's sentence
    metric: str
    condition: str  # a condition label (study.names, or the overrides that distinguish it)
    baseline: str | None  # None: one-sample claim about `condition` against `null` (the preset's `against`)
    kind: str = "superiority"
    direction: int = 1
    paper: float = math.nan  # the paper's one-seed effect
    effect: float = math.nan  # effect of interest (superiority's "not replicated" bar); NaN: |paper|
    margin: float = math.nan
    regime: str = DEFAULT_REGIME
    baseline_regime: str | None = None  # the baseline's eval regime when it differs (e.g. tool vs no_tool)
    null: float = 0.0
    null_se: float = 0.0  # the bar's standard error when it was measured (`against_eval`), else 0: exact
    null_from: str = ""  # the evaluation file the bar was read from (`against_eval`)
    success: tuple[str, float] | None = None  # (op, threshold): the rate of seeds meeting it
    precondition: Precondition | None = None
    role: str = ""  # primary | secondary: its place in a gatekeeping procedure (multiplicity.py)
    also: tuple[Precondition, ...] = ()  # further named preconditions (`precondition: [a, b]`): all must hold
    requires: str | None = None  # a claim that must replicate first (keeps_gain: the gain it keeps)
    margin_share: float = math.nan  # keeps_gain: the share of the required gain that may be lost
    bounds: tuple[float, float] | None = None  # bounded: [low, high] of the difference, claimed direction
    extra: tuple[tuple[str, Any], ...] = ()  # the keys its type declares (ClaimType.Keys): numbers read as such

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.extra).get(key, default)

    @property
    def gates(self) -> tuple[Precondition, ...]:
        return (() if self.precondition is None else (self.precondition,)) + self.also

    @property
    def in_family(self) -> bool:
        """Descriptive claims and claims declared untestable before the runs (a precondition with a
        reason and no metric) decide nothing, so they take no share of alpha; a claim whose measured
        precondition fails keeps its share (the family is fixed before the data)."""
        declared_out = self.precondition is not None and self.precondition.metric is None
        return CLAIM_TYPES[self.kind].in_family and not declared_out

    @property
    def bar(self) -> float:
        """The effect of interest: declared, else the paper's effect's size."""
        return abs(self.effect) if math.isfinite(self.effect) else abs(self.paper)


@dataclass(frozen=True)
class Plan:
    looks: tuple[int, ...] = DEFAULT_PLAN  # seeds per arm at each planned look
    spending: str = "obrien_fleming"
    declared: bool = False  # False: the study declared no plan; DEFAULT_PLAN stands in
    # non-binding futility: no further look for a claim needing more than `futility` x the last look's
    # seeds per arm (stopping only removes chances to reject, so the plan's level is unchanged)
    futility: float | None = None

    @property
    def n_max(self) -> int:
        return self.looks[-1]

    def futile(self, seeds_needed: float) -> bool:
        """Whether the futility rule stops a claim that would need `seeds_needed` seeds per arm."""
        return self.futility is not None and seeds_needed > self.futility * self.n_max


@dataclass
class Declared:
    claims: list[Claim] = field(default_factory=list)
    plan: Plan = field(default_factory=Plan)
    alpha: float = 0.05
    test: str = DEFAULT_TEST  # randomization | welch: what decides a two-sample look (level.py)
    multiplicity: Graph | None = None  # None: Bonferroni over the family (multiplicity.py)
    realisations: int = 1  # the claims are decided this many times (re-runs): each at alpha / realisations

    @property
    def budget(self) -> float:
        """The family's alpha for this realisation: re-runs of one claim share its error budget."""
        return self.alpha / self.realisations

    def shares(self) -> dict[str, float]:
        """Each family claim's initial alpha: the graph's weight, else an equal (Bonferroni) share."""
        family = [c.id for c in self.claims if c.in_family]
        if self.multiplicity is None:
            return {c: self.budget / max(1, len(family)) for c in family}
        return {c: float(w) * self.budget for c, w in zip(self.multiplicity.ids, self.multiplicity.weights)}


def _direction(value: Any, where: str, problems: list[str]) -> int:
    text = str(value if value is not None else "higher").strip().lower()
    if text in ("higher", "+", "+1", "1", "up"):
        return 1
    if text in ("lower", "-", "-1", "down"):
        return -1
    problems.append(f"{where}: direction must be higher or lower, got {value!r}")
    return 1


def _success(value: Any, where: str, problems: list[str]) -> tuple[str, float] | None:
    if value is None:
        return None
    text = str(value).replace(" ", "")
    op = next((o for o in OPS if text.startswith(o)), None)
    threshold = number(text[len(op):], f"{where}: success", problems) if op else math.nan
    if op is None or not math.isfinite(threshold):
        problems.append(f"{where}: success must look like '>=0.2' (op and threshold), got {value!r}")
        return None
    return op, threshold


def _precondition(raw: Any, where: str, problems: list[str]) -> Precondition | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not raw.get("check"):
        problems.append(f"{where}: precondition must be a mapping with a `check` name")
        return None
    where = f"{where} precondition {raw['check']!r}"
    check_keys(raw, (PreconditionKeys,), where, problems)
    if raw.get("metric") is None:
        if not raw.get("reason"):
            problems.append(f"{where}: give `metric`, `op` and `threshold`, or a `reason` it cannot be tested")
        return Precondition(str(raw["check"]), reason=str(raw.get("reason") or ""))
    op = str(raw.get("op", ">="))
    if op not in OPS:
        problems.append(f"{where}: op must be one of {' '.join(OPS)}, got {op!r}")
    threshold = numbers(raw, PreconditionKeys, where, problems)["threshold"]
    if raw.get("threshold") is None:
        problems.append(f"{where}: needs a threshold")
    return Precondition(str(raw["check"]), str(raw["metric"]),
                        None if raw.get("condition") is None else str(raw["condition"]),
                        None if raw.get("regime") is None else str(raw["regime"]), op, threshold,
                        str(raw.get("reason") or ""))


def _schemas(kind: str | None = None) -> tuple[type, ...]:
    """The claim's keys: the common ones and its type's (every registered type's when the type is unknown)."""
    types = [CLAIM_TYPES[kind]] if kind in CLAIM_TYPES else list(CLAIM_TYPES.values())
    return (ClaimKeys, *(t.Keys for t in types))


def _gates(raw: Any, named: Mapping, where: str, problems: list[str]) -> list[Precondition]:
    """A claim's preconditions: an inline mapping, or the name(s) of the study's `preconditions:`."""
    if raw is None:
        return []
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    out = []
    for item in items:
        if isinstance(item, str):
            if item not in named:
                problems.append(f"{where}: precondition {item!r} is not in the study's `preconditions:` "
                                f"(declared: {', '.join(named) or 'none'})")
                continue
            item = named[item]
        if (pre := _precondition(item, where, problems)) is not None:
            out.append(pre)
    return out


def _bounds(raw: Any, where: str, problems: list[str]) -> tuple[float, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        problems.append(f"{where}: bounds must be [low, high], got {raw!r}")
        return None
    low, high = (number(b, f"{where}: bounds", problems) for b in raw)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def parse_claim(raw: Any, index: int, problems: list[str], named: Mapping | None = None) -> Claim | None:
    where = f"claims[{index}]"
    if not isinstance(raw, Mapping):
        problems.append(f"{where} must be a mapping, got {type(raw).__name__}")
        return None
    where = f"claim {raw.get('id', index)!r}"
    missing = check_keys(raw, _schemas(), where, problems)  # any registered type's keys are known here
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
        return None
    kind = str(raw.get("type", "superiority"))
    if kind not in CLAIM_TYPES:
        problems.append(f"{where}: type must be one of {', '.join(CLAIM_TYPES)}, got {kind!r}")
        return None
    gates = _gates(raw.get("precondition"), named or {}, where, problems)
    role = str(raw.get("role") or "")
    if role and role not in ROLES:
        problems.append(f"{where}: role must be one of {', '.join(ROLES)}, got {role!r}")
    direction = _direction(raw.get("direction"), where, problems)
    n = {k: v for schema in _schemas(kind) for k, v in numbers(raw, schema, where, problems).items()}
    claim = Claim(
        id=str(raw["id"]), text=str(raw["claim"]), metric=str(raw["metric"]), condition=str(raw["condition"]),
        baseline=None if raw.get("baseline") is None else str(raw["baseline"]), kind=kind, direction=direction,
        paper=n["paper"], effect=n["effect"], margin=n["margin"], null=n["against"],
        regime=str(raw.get("regime") or DEFAULT_REGIME),
        baseline_regime=None if raw.get("baseline_regime") is None else str(raw["baseline_regime"]),
        success=_success(raw.get("success"), where, problems),
        precondition=gates[0] if gates else None, also=tuple(gates[1:]), role=role,
        requires=None if raw.get("requires") is None else str(raw["requires"]),
        margin_share=n.get("margin_share", math.nan),
        bounds=_bounds(raw.get("bounds"), where, problems),
        extra=tuple((k, n.get(k, raw[k])) for k in CLAIM_TYPES[kind].keys if k in raw))
    found: list[str] = []
    claim = _measured_bar(claim, raw, found)
    CLAIM_TYPES[kind].check(claim, raw, found)
    check_words(claim, found)
    check_gates(claim, found)
    check_method(claim, found)
    problems.extend(found)
    return None if found else claim


def _measured_bar(claim: Claim, raw: Mapping, problems: list[str]) -> Claim:
    """The claim with its bar read from `against_eval` (value and sampling SE), or as it was."""
    source = raw.get("against_eval")
    if source is None:
        return claim
    if "against" in raw or claim.baseline is not None:
        problems.append(f"claim {claim.id!r}: `against_eval` is a one-sample claim's bar: give it without "
                        "`against` and without a `baseline`")
        return claim
    try:
        bar = read_bar(str(source), claim.metric, claim.regime)
    except ValueError as err:
        problems.append(f"claim {claim.id!r}: {err}")
        return claim
    return replace(claim, null=bar.value, null_se=bar.se, null_from=bar.source)


def check_gates(claim: Claim, problems: list[str]) -> None:
    """A gate that reads the claim's own outcome on one of its arms selects on the result it gates: refused."""
    def components(metric: str) -> list[str]:
        return [m.strip() for m in metric.split(" - ")]

    arms = {claim.condition, claim.baseline}
    for pre in claim.gates:
        if pre.metric and (pre.condition or claim.condition) in arms and \
                set(components(pre.metric)) & set(components(claim.metric)):
            problems.append(f"claim {claim.id!r}: precondition {pre.check!r} reads the claim's own outcome "
                            f"({pre.metric} of {pre.condition or claim.condition}, one of its arms): a gate must "
                            "read the mechanism elsewhere (another metric, or an arm the claim does not compare)")


def parse_plan(raw: Any, problems: list[str]) -> Plan:
    if raw is None:
        return Plan()
    if not isinstance(raw, Mapping):
        problems.append(f"plan must be a mapping with `looks` and `spending`, got {raw!r}")
        return Plan()
    check_keys(raw, (PlanKeys,), "plan", problems)  # a missing `looks` is named below, with an example
    looks = raw.get("looks")
    try:
        looks = tuple(int(n) for n in looks)
    except (TypeError, ValueError):
        problems.append(f"plan.looks must be a list of seed counts per arm, e.g. [5, 10, 20], got {looks!r}")
        return Plan()
    if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
        problems.append(f"plan.looks must increase and start at >= 2 seeds, got {list(looks)}")
        return Plan()
    spending = str(raw.get("spending", "obrien_fleming"))
    if spending not in SPENDING:
        problems.append(f"plan.spending must be one of {', '.join(SPENDING)}, got {spending!r}")
        spending = "obrien_fleming"
    futility = raw.get("futility")
    if futility is not None and (isinstance(futility, bool) or not isinstance(futility, (int, float))
                                 or not futility >= 1):
        problems.append(f"plan.futility must be a number >= 1 (stop a claim needing more than that many times the "
                        f"last look's seeds, e.g. 10), got {futility!r}")
        futility = None
    return Plan(looks, spending, declared=True, futility=None if futility is None else float(futility))


def parse_declared(block: Mapping | None, problems: list[str]) -> Declared:
    """The claims, plan and alpha of a `study:` block; problems are appended, bad claims skipped."""
    if not isinstance(block, Mapping):
        return Declared()
    check_keys(block, (StudyKeys,), "", problems)
    raw_claims = block.get("claims") or []
    if not isinstance(raw_claims, (list, tuple)):
        problems.append("claims must be a list")
        raw_claims = []
    named = block.get("preconditions") or {}
    if not isinstance(named, Mapping):
        problems.append("preconditions must map a name to a precondition (check, metric, condition, op, threshold)")
        named = {}
    claims = [c for i, raw in enumerate(raw_claims) if (c := parse_claim(raw, i, problems, named)) is not None]
    ids = [c.id for c in claims]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"claim ids must be unique: {', '.join(dupes)}")
    for i, c in enumerate(claims):
        if c.requires is not None and c.requires not in ids[:i]:
            problems.append(f"claim {c.id!r}: requires {c.requires!r}, which must be a claim declared before it")
    alpha = number(block.get("alpha", 0.05), "alpha", problems, positive=True)
    if not (0 < alpha < 1):
        problems.append(f"alpha must be in (0, 1), got {block.get('alpha')!r}")
        alpha = 0.05
    test = str(block.get("test") or DEFAULT_TEST)
    if test not in TESTS:
        problems.append(f"test must be one of {', '.join(TESTS)}, got {test!r}")
        test = DEFAULT_TEST
    graph = parse_multiplicity(block.get("multiplicity"), [c for c in claims if c.in_family], problems)
    realisations = block.get("realisations", 1)
    if not isinstance(realisations, int) or isinstance(realisations, bool) or realisations < 1:
        problems.append(f"realisations must be a whole number >= 1 (how many times these claims are decided, "
                        f"re-runs included), got {realisations!r}")
        realisations = 1
    return Declared(claims, parse_plan(block.get("plan"), problems), alpha, test, graph, realisations)
