"""The claims engine: each declared claim's verdict from the per-run values table.

For each claim, in order: its precondition (not testable when it fails); its looks (the cumulative
seeds per arm after each batch of runs, i.e. each sweep directory, oldest first); at each look
Welch's interval at the nominal level the seed plan's spending allows for this look, with the
study's alpha split equally over the family of declared (non-descriptive) claims (Bonferroni: the
intervals and the tests stay one object); the first look whose verdict is decisive (replicated or
not replicated) decides and later seeds are reported but change nothing (the plan stops there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ablate.stats.claims.claim_types import CLAIM_TYPES, decide
from ablate.stats.claims.declared import Claim, Declared, Plan
from ablate.stats.maths import level
from ablate.stats.maths.multiplicity import sequentially_rejective
from ablate.stats.maths.power import pooled_sd, seeds_needed
from ablate.stats.maths.sequential import information, nominal_levels
from ablate.stats.maths.verdicts import gate, rate
from ablate.stats.values.reach import reach_metric
from ablate.stats.values.table import CURVE_REGIME, OPTIONAL_COLUMNS, is_curve_metric, reach_values, sweep_values

NO_ALPHA = "the plan has no alpha left at this look"  # a look the spending function gave nothing
CLAIM_COLUMNS = [
    "id", "claim", "type", "claimed", "metric", "regime", "condition", "baseline", "direction", "paper", "bar", "margin",
    "n", "n_baseline", "mean", "mean_baseline", "estimate", "ci_low", "ci_high", "confidence", "p_value",
    "alpha_nominal", "look", "looks_planned", "planned", "decided_at", "verdict", "excluded", "reason",
    "precondition", "precondition_value", "precondition_status", "rate", "rate_baseline", "sd_pooled",
    "seeds_needed", "next_look", "family_size",
]
LOOK_COLUMNS = ["id", "look", "n", "n_baseline", "planned", "fraction", "alpha_nominal", "estimate", "ci_low",
                "ci_high", "p_value", "verdict"]


@dataclass
class ClaimsResult:
    table: pd.DataFrame
    looks: pd.DataFrame
    plan: Plan
    alpha: float
    problems: list[str] = field(default_factory=list)
    note: str = ""  # which registration decided, and the claims' standing (ablate.stats.claims.standing)
    procedure: str = ""  # how alpha is shared over the family ("": Bonferroni; else multiplicity.Graph.name)
    test: str = "welch"  # what decided its two-sample looks (welch | randomization): set from the declaration


def components(metric: str) -> list[str]:
    """`A - B` (a per-run difference of two metrics, e.g. pass@16 - pass@1) -> [A, B]; else [metric]."""
    return [m.strip() for m in metric.split(" - ")] if " - " in metric else [metric]


def condition_values(table: pd.DataFrame, condition: str, regime: str, metric: str) -> pd.DataFrame:
    parts = components(metric)
    if len(parts) == 2:  # per run: first minus second, runs that have both
        a, b = (condition_values(table, condition, regime, m) for m in parts)
        both = a.merge(b[["run", "value"]], on="run", suffixes=("", "_minus"))
        both["value"] = both["value"] - both["value_minus"]
        own = [c for c in OPTIONAL_COLUMNS if c in both]  # a component's trials or band are not the difference's
        return both.drop(columns=["value_minus", *own]).sort_values("batch", kind="stable")
    regime = CURVE_REGIME if is_curve_metric(metric) else regime
    rows = table[(table["condition"] == condition) & (table["regime"] == regime) & (table["metric"] == metric)]
    rows = rows[np.isfinite(rows["value"].to_numpy(dtype=np.float64))]
    return rows.sort_values("batch", kind="stable")


def _precondition(claim: Claim, table: pd.DataFrame) -> tuple[str, float, str]:
    """(status, value, text) of the first gate that does not hold, else of the last: status held /
    failed / undetermined / not measured / declared (none: no gate)."""
    out = ("none", math.nan, "")
    for pre in claim.gates:
        out = _gate(claim, pre, table)
        if out[0] != "held":
            return out
    return out


def _gate(claim: Claim, pre, table: pd.DataFrame) -> tuple[str, float, str]:
    if pre.metric is None:
        return "declared", math.nan, f"{pre.check}: {pre.reason}"
    cond = pre.condition or claim.condition
    rows = condition_values(table, cond, pre.regime or claim.regime, pre.metric)
    if rows.empty:
        return "not measured", math.nan, f"{pre.check}: no {pre.metric} for {cond}"
    band = (float(rows["band_low"].iloc[0]), float(rows["band_high"].iloc[0])) if "band_low" in rows else None
    g = gate(rows["value"], pre.op, pre.threshold, band=band if len(rows) == 1 else None)
    shown = (f"{g.value:.3g} (one value: no interval)" if not math.isfinite(g.low) else f"{g.value:.3g}"
             if g.low == g.high else f"{g.value:.3g} [{g.low:.3g}, {g.high:.3g}]")  # a point: no seed spread
    return g.status, g.value, f"{pre.check}: {pre.metric} of {cond} = {shown} (needs {pre.op} {pre.threshold:g})"


def look_history(x: pd.DataFrame, y: pd.DataFrame | None) -> list[tuple[int, int, int]]:
    """(last batch, n_x, n_y) after each batch that added seeds to either arm, from the first batch at
    which every arm has seeds (an arm run in a later directory, as 004's oracle SFT after its other
    arms, makes that batch the claim's first look, not a look with an empty arm)."""
    batches = sorted(set(x["batch"]) | (set() if y is None else set(y["batch"])))
    out = []
    for b in batches:
        nx = int((x["batch"] <= b).sum())
        ny = 0 if y is None else int((y["batch"] <= b).sum())
        if nx == 0 or (y is not None and ny == 0):
            continue
        if not out or (nx, ny) != out[-1][1:]:
            out.append((b, nx, ny))
    return out


def _fraction(nx: int, ny: int | None, plan: Plan) -> float:
    if ny is None:  # one-sample: information is n
        return nx / plan.n_max
    return information(nx, ny) / information(plan.n_max, plan.n_max)


def _planned(now: tuple, before: tuple | None, plan: Plan) -> bool:
    """A look is planned when every arm that gained seeds since the previous look now holds one of
    the plan's seed counts (an arm that gained none keeps what it had: 10 vs 11 after adding static's
    seeds 5-9 is the plan's look at 10, even though the baseline reached 11 at an unplanned look)."""
    changed = [n for i, n in enumerate(now) if n is not None and (before is None or n != before[i])]
    return plan.declared and bool(changed) and all(n in plan.looks for n in changed)


def look_verdict(claim: Claim, xs: np.ndarray, ys: np.ndarray | None, a: float, test: str = "welch",
                 trials: tuple | None = None):
    """(estimate, verdict, excluded, reason) of one look at nominal level `a` (xs, ys: the claim's
    per-seed values so far, ClaimType.values applied; trials: each arm's per-seed trial counts of a rate
    metric, or None)."""
    rule = CLAIM_TYPES[claim.kind]
    est = rule.estimate(claim, xs, ys, 1.0 - a if a > 0 else 1.0 - 1e-12, trials)
    v, excluded, why = decide(claim, est.low, est.high)
    if claim.in_family:  # the study's test (or the claim type's exact test) has its say
        guarded, why = rule.guard(claim, v, why, xs, ys, a, test)
        v, excluded = guarded, excluded if guarded == v else ""
    return est, v, excluded, why


def _decide_looks(claim: Claim, x: pd.DataFrame, y: pd.DataFrame | None, plan: Plan, alpha: float,
                  test: str = "welch") -> list[dict]:
    """The claim at every look, each at its nominal level: (n, n_baseline, estimate, verdict, ...)."""
    history = look_history(x, y)
    one_sample = y is None
    fractions = [_fraction(nx, None if one_sample else ny, plan) for _, nx, ny in history]
    if claim.in_family:
        # fractions must increase: a look that adds no information (e.g. 5 vs 11 after 11 vs 5) is nudged
        levels = nominal_levels(_increasing(fractions), alpha, plan.spending)
    else:
        levels = [alpha] * len(history)
    out, before = [], None
    for (b, nx, ny), t, a in zip(history, fractions, levels):
        xs = x[x["batch"] <= b]["value"].to_numpy(dtype=np.float64)
        ys = None if one_sample else y[y["batch"] <= b]["value"].to_numpy(dtype=np.float64)
        trials = (_trials(x, b), None if one_sample else _trials(y, b))
        est, v, excluded, why = look_verdict(claim, xs, ys, a, test, trials)
        if a <= 0 and claim.in_family:
            v, excluded, why = "inconclusive", "", NO_ALPHA
        out.append({"n": nx, "n_baseline": None if one_sample else ny, "fraction": t, "alpha_nominal": a,
                    "estimate": est, "verdict": v, "excluded": excluded, "reason": why if not est.note else f"{why} ({est.note})",
                    "planned": _planned((nx, None if one_sample else ny), before, plan)})
        before = (nx, None if one_sample else ny)
    return out


def _trials(rows: pd.DataFrame, batch: int) -> np.ndarray | None:
    """The per-seed trial counts of a rate metric's rows up to `batch` (the values table's `trials`), or None."""
    return rows[rows["batch"] <= batch]["trials"].to_numpy(dtype=np.float64) if "trials" in rows else None


def _multiplicity_reason(reason: str, procedure: str, level: float) -> str:
    """The claim's reason with the level its multiplicity procedure gave it. With none passed on, the
    procedure is the reason: the plan's generic "no alpha left" would blame the seed plan instead."""
    if level > 0:
        return f"{reason}; {procedure}: alpha {level:.3g}"
    kept = reason.removeprefix(NO_ALPHA).strip()
    if reason.startswith(NO_ALPHA) and kept.startswith("(") and kept.endswith(")"):
        kept = kept[1:-1]  # the estimate's note, no longer an aside to the generic reason
    return "; ".join(filter(None, [kept, f"{procedure}: no alpha passed to it (the claims before it were not replicated)"]))


def _increasing(fractions: list[float]) -> list[float]:
    out = []
    for t in fractions:
        out.append(t if not out or t > out[-1] else out[-1] + 1e-9)
    return out


def _next_look(n: int, plan: Plan) -> int | None:
    return next((k for k in plan.looks if k > n), None)


def evaluate(declared: Declared, table: pd.DataFrame, effect_default: float = 0.03) -> ClaimsResult:
    """Every declared claim's verdict (one row each) and its looks (one row per claim and look)."""
    problems: list[str] = []
    family = [c for c in declared.claims if c.in_family]
    levels = family_levels(declared, family, table, effect_default)
    rows, look_rows = [], []
    decided: dict[str, dict] = {}
    for claim in declared.claims:
        claim, blocked = CLAIM_TYPES[claim.kind].prepare(claim, decided)  # e.g. the gain it keeps, established?
        row, looks = _evaluate_one(claim, table, declared.plan, levels.get(claim.id, declared.alpha),
                                   effect_default, problems, declared.test)
        if blocked:
            row.update(verdict="not testable", excluded="", reason=blocked, decided_at="")
            for lk in looks:
                lk["verdict"] = "not testable"
        decided[claim.id] = row
        row["family_size"] = len(family) if claim.in_family else 0
        if declared.multiplicity is not None and claim.in_family:
            row["reason"] = _multiplicity_reason(row["reason"], declared.multiplicity.name, levels[claim.id])
        rows.append(row)
        look_rows += looks
    return ClaimsResult(pd.DataFrame(rows, columns=CLAIM_COLUMNS), pd.DataFrame(look_rows, columns=LOOK_COLUMNS),
                        declared.plan, declared.alpha, problems,
                        procedure="" if declared.multiplicity is None else declared.multiplicity.name,
                        test=declared.test)


def family_levels(declared: Declared, family: list[Claim], table: pd.DataFrame,
                  effect_default: float) -> dict[str, float]:
    """Each family claim's alpha over its plan: an equal share (Bonferroni, the default), or the
    level the declared graph leaves it once the claims it can reject have passed theirs on."""
    graph = declared.multiplicity
    if graph is None:
        return {c.id: declared.budget / max(1, len(family)) for c in family}

    def replicated(i: int, level: float) -> bool:
        row, _ = _evaluate_one(family[i], table, declared.plan, level, effect_default, [], declared.test)
        return row["verdict"] == "replicated"

    _, levels = sequentially_rejective(replicated, graph.weights, graph.transitions, declared.budget)
    return {c.id: float(a) for c, a in zip(family, levels)}


def _bar(claim: Claim) -> str:
    """A one-sample claim's bar as the baseline cell: a constant, or the evaluation it was read from."""
    if claim.null_se > 0:
        return f"(measured {claim.null:g} +- {claim.null_se:.2g} SE, {claim.null_from})"
    return f"(value {claim.null:g})"


def _blank(claim: Claim) -> dict:
    row = {c: math.nan for c in CLAIM_COLUMNS}
    row.update(id=claim.id, claim=claim.text, type=claim.kind, claimed=CLAIM_TYPES[claim.kind].claimed(claim),
               metric=claim.metric,
               regime=CURVE_REGIME if is_curve_metric(components(claim.metric)[0]) else
               claim.regime + (f" vs {claim.baseline_regime}" if claim.baseline_regime else ""),
               condition=claim.condition, baseline=claim.baseline or _bar(claim),
               direction="higher" if claim.direction > 0 else "lower", paper=claim.paper,
               bar=claim.bar, margin=claim.margin, precondition="", precondition_status="none", rate="",
               rate_baseline="", look="", looks_planned="", planned="", decided_at="", reason="")
    return row


def _evaluate_one(claim: Claim, table: pd.DataFrame, plan: Plan, alpha: float, effect_default: float,
                  problems: list[str], test: str = "welch") -> tuple[dict, list[dict]]:
    row = _blank(claim)
    status, value, text = _precondition(claim, table)
    row.update(precondition=text, precondition_value=value, precondition_status=status)
    x = condition_values(table, claim.condition, claim.regime, claim.metric)
    y = None if claim.baseline is None else condition_values(table, claim.baseline, claim.baseline_regime or claim.regime,
                                                    claim.metric)
    missing = [c for c, v in ((claim.condition, x), (claim.baseline, y)) if c is not None and v is not None and v.empty]
    if status in ("failed", "undetermined", "declared", "not measured"):
        row.update(verdict="not testable", reason=f"precondition {status}: {text}")
    elif missing:
        row.update(verdict="not testable", reason=f"no {claim.metric} [{row['regime']}] values for "
                                                  + ", ".join(missing))
        problems.append(f"claim {claim.id}: no {claim.metric} [{row['regime']}] values for {', '.join(missing)}")
    if missing:
        return row, []
    raw_x = x["value"].to_numpy(dtype=np.float64)
    raw_y = None if y is None else y["value"].to_numpy(dtype=np.float64)
    rule = CLAIM_TYPES[claim.kind]  # what the claim is about per seed: the metric, or e.g. recovered or not
    x = x.assign(value=rule.values(claim, raw_x))
    y = None if y is None else y.assign(value=rule.values(claim, raw_y))
    looks = _decide_looks(claim, x, y, plan, alpha, test)
    decided = next((i for i, lk in enumerate(looks) if lk["verdict"] in ("replicated", "not replicated")), None)
    final = looks[-1]
    at = looks[decided] if decided is not None else final  # the look that decides, or the last
    est = at["estimate"]
    xs = x["value"].to_numpy(dtype=np.float64)
    ys = None if y is None else y["value"].to_numpy(dtype=np.float64)
    row.update(n=at["n"], n_baseline=at["n_baseline"], mean=float(xs[: at["n"]].mean()),
               mean_baseline=math.nan if ys is None else float(ys[: at["n_baseline"]].mean()), estimate=est.diff,
               ci_low=est.low, ci_high=est.high, confidence=1.0 - at["alpha_nominal"], p_value=est.p_value,
               alpha_nominal=at["alpha_nominal"], look=f"{(decided if decided is not None else len(looks) - 1) + 1}",
               looks_planned=f"{len(plan.looks)}" if plan.declared else "no plan",
               planned="yes" if at["planned"] else "no (unplanned look)",
               sd_pooled=pooled_sd(xs, ys) if ys is not None else float(np.std(xs, ddof=1)) if xs.size > 1 else math.nan)
    if row["verdict"] != "not testable":
        row["verdict"], row["excluded"], row["reason"] = at["verdict"], at["excluded"], at["reason"]
        if decided is not None and decided < len(looks) - 1:
            row["decided_at"] = f"look {decided + 1} of {len(looks)} taken"
            row["reason"] += f"; decided at look {decided + 1}, later seeds do not reopen it"
    if claim.success is not None:
        row["rate"] = _rate_text(raw_x, claim.success, 1.0 - alpha)
        row["rate_baseline"] = "" if raw_y is None else _rate_text(raw_y, claim.success, 1.0 - alpha)
    if row["verdict"] == "inconclusive" and alpha > 0 and not _spread_stop(row, claim, xs, ys, test):
        _plan_ahead(row, claim, final, plan, alpha, effect_default)
    if row["verdict"] == "not testable":  # every look reads the same: the mechanism never ran
        for lk in looks:
            lk["verdict"] = "not testable"
    look_rows = [{"id": claim.id, "look": i + 1, "n": lk["n"], "n_baseline": lk["n_baseline"],
                  "planned": lk["planned"], "fraction": lk["fraction"], "alpha_nominal": lk["alpha_nominal"],
                  "estimate": lk["estimate"].diff, "ci_low": lk["estimate"].low, "ci_high": lk["estimate"].high,
                  "p_value": lk["estimate"].p_value, "verdict": lk["verdict"]} for i, lk in enumerate(looks)]
    return row, look_rows


def _plan_ahead(row: dict, claim: Claim, final: dict, plan: Plan, alpha: float, effect_default: float) -> None:
    """An inconclusive claim's seeds needed at its level, and the plan's next look (none when the plan
    has none left or its futility rule stops the claim)."""
    target = CLAIM_TYPES[claim.kind].target(claim)
    target = target if math.isfinite(target) and target > 0 else effect_default
    row["seeds_needed"] = seeds_needed(row["sd_pooled"], target, alpha)
    # the plan's next look for the arm with fewer seeds (an arm already past it adds none)
    row["next_look"] = _next_look(int(min(final["n"], final["n_baseline"] or final["n"])), plan)
    if row["next_look"] is not None and plan.futile(row["seeds_needed"]):
        row["next_look"] = None
        row["reason"] += (f"; futile by the plan's rule (more than {plan.futility:g} x its last look of "
                          f"{plan.n_max} seeds per arm): no further look")


def _spread_stop(row: dict, claim: Claim, xs: np.ndarray, ys: np.ndarray | None, test: str) -> bool:
    """Whether the guard is expected to refuse the arms' spreads at any seed count; then the claim gets
    no seeds-needed figure and no next look (Welch's power line would promise a decision it cannot give)."""
    low = CLAIM_TYPES[claim.kind].settled_spread(claim, xs, ys, test)
    if low is None:
        return False
    row["reason"] += (f"; the arms' seed SDs differ at least {low:.3g}-fold (one-sided 97.5% F bound, over the "
                      f"guard's {level.SPREAD_MAX:g}), so no added seeds are expected to decide it: no further look")
    return True


def _rate_text(values: np.ndarray, success: tuple[str, float], confidence: float) -> str:
    k, n, lo, hi = rate(values, success[0], success[1], confidence)
    return f"{k}/{n} {success[0]} {success[1]:g} [{lo:.2f}, {hi:.2f}]"


def reach_thresholds(declared: Declared, table: pd.DataFrame) -> dict[str, float]:
    """`reach:COL>=baseline` -> the mean of final:COL over the claim's baseline seeds of its first look
    (the first batch holding any; `table` must hold final:COL rows). The bar is frozen when first seen:
    a bar re-averaged over later seeds would move every earlier look's values (a pooled report would
    re-decide look 1 against a bar look 1 never had), and the looks would test different targets."""
    out = {}
    for claim in declared.claims:
        parsed = reach_metric(claim.metric)
        if parsed is None or parsed[2] != "baseline" or claim.baseline is None:
            continue
        rows = condition_values(table, claim.baseline, CURVE_REGIME, f"final:{parsed[0]}")
        rows = rows[rows["batch"] == rows["batch"].min()] if len(rows) else rows
        out[claim.metric] = float(rows["value"].mean()) if len(rows) else math.nan
    return out


def claim_metrics(declared: Declared) -> list[str]:
    """Every metric the claims and their preconditions read (reach claims read final:COL first)."""
    out: list[str] = []
    for c in declared.claims:
        parsed = reach_metric(c.metric)
        wanted = [f"final:{parsed[0]}"] if parsed else components(c.metric)
        for pre in c.gates:
            wanted += components(pre.metric) if pre.metric else []
        for m in wanted:  # once each: a precondition often reads its claim's own metric
            if m not in out:
                out.append(m)
    return out


def sweep_claims(sweep, declared: Declared, labels: dict, regimes, effect_default: float) -> ClaimsResult:
    """The claims of a loaded sweep: the per-run values table, then `evaluate`. The CLI and the
    calibration harness both come here."""
    table = sweep_values(sweep, labels, claim_metrics(declared), regimes)
    thresholds = reach_thresholds(declared, table)
    done: set[str] = set()
    for c in declared.claims:
        parsed = reach_metric(c.metric)
        if parsed is None or c.metric in done:  # two claims on one reach metric read the same rows once
            continue
        done.add(c.metric)
        thr = thresholds.get(c.metric, math.nan) if parsed[2] == "baseline" else float(parsed[2])
        table = pd.concat([table, reach_values(sweep, labels, c.metric, thr)], ignore_index=True)
    return evaluate(declared, table, effect_default)
