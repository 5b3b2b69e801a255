"""Per-run values of the metrics claims are about: one tidy row per (run, regime, metric).

The claims engine reads only this table, so the live path (run directories) and a re-analysis of
committed reports (summary.csv's per-run rows) decide by the same code. Three kinds of metric:

- an evaluation metric (`pass@1`, `by_operands/3/pass@1`, `tool/tool_errors`, ...) in an eval regime,
  recomputed from samples.jsonl as summary.csv has it (a summary-only number as the run reports it);
- a training-curve summary of a metrics.csv column, written `AGG:COLUMN[@START:END]` with AGG one of
  final, mean, max, min, auc (mean over the logged points by the trapezoid rule: the area under the
  curve per step), slope (change per step from the first to the last point), changes (the share of
  consecutive logged points whose value differs: a controller that flips), over steps START <= step <= END (either may be left out): e.g.
  `mean:curriculum/explore_frac@50:` or `max:val/no_answer_rate@50:99`;
- steps to reach, censored: `reach:COLUMN>=VALUE` (`reach_time:` for seconds), as ablate.stats.values.reach
  defines it for the report's reach table too: the first step whose value reaches VALUE, or the run's
  last step when it never does. VALUE may be `baseline`: the mean over the claim's baseline seeds of
  `final:COLUMN` at its first look (frozen there, so later looks keep the target).
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ablate.metrics import prompt_ratios
from ablate.stats.values.blocks import flatten_summary
from ablate.stats.values.reach import CPU_COLUMN, first_reach, reach_metric

VALUE_COLUMNS = ["run", "batch", "condition", "seed", "regime", "metric", "value"]
# optional, read where present: `trials`, the count a rate metric's value is a share of (its samples or
# prompts: `rate_trials`), for the exact bound of a rate with no events; `band_low` / `band_high`, the
# interval of a row that is already a condition's mean (a curves.csv.gz band standing in for its seeds)
OPTIONAL_COLUMNS = ("trials", "band_low", "band_high")
CURVE_REGIME = "train"  # metrics.csv has no eval regime
AGGREGATES = ("final", "mean", "max", "min", "auc", "slope", "changes")
_CURVE = re.compile(r"^(final|mean|max|min|auc|slope|changes):(.+?)(?:@(-?\d*):(-?\d*))?$")


# rates over the whole test set, as ablate.metrics.prompt_ratios defines them: a count of events over the run's
# samples (its n_samples; pass@1 = correct / samples, evaluation drawing the same n for every prompt) or over
# its prompts (n_prompts). A by-operand subset's counts are not in summary.csv, so it has none.
# tests/test_stats_rates.py holds the rule to prompt_ratios' table.
_PER_SAMPLE = re.compile(r"^(pass@1|pass\^1|exact_pass@1|coverage|verdict_rate/.+|tool/calc_emission_rate)$")
_PER_PROMPT = re.compile(r"^(mixed_fraction|best_of_n)$")


def rate_trials(metric: str, n_prompts: float, n_samples: float) -> float:
    """The count a rate metric's value is a share of (one run: its samples or prompts), NaN for any other
    metric: the `trials` column, which lets a rate with no events be decided on its exact bound."""
    if _PER_SAMPLE.match(metric):
        return float(n_samples)
    return float(n_prompts) if _PER_PROMPT.match(metric) else math.nan


def is_curve_metric(metric: str) -> bool:
    return bool(_CURVE.match(metric) or reach_metric(metric))


def curve_value(frame: pd.DataFrame | None, metric: str) -> float:
    """`AGG:COLUMN[@START:END]` of one run's metrics.csv (indexed by step); NaN when absent."""
    m = _CURVE.match(metric)
    if m is None or frame is None or m.group(2) not in frame.columns:
        return math.nan
    agg, column = m.group(1), m.group(2)
    s = frame[column].dropna()
    start = int(m.group(3)) if m.group(3) else None
    end = int(m.group(4)) if m.group(4) else None
    if start is not None:
        s = s[s.index >= start]
    if end is not None:
        s = s[s.index <= end]
    if s.empty:
        return math.nan
    if agg == "final":
        return float(s.iloc[-1])
    if agg == "slope":  # change per step, first to last logged point (e.g. seconds per step of time/elapsed_s)
        span = float(s.index[-1] - s.index[0])
        return float((s.iloc[-1] - s.iloc[0]) / span) if span > 0 else math.nan
    if agg == "changes":
        return float((s.to_numpy()[1:] != s.to_numpy()[:-1]).mean()) if s.size > 1 else math.nan
    if agg == "auc":
        x, y = s.index.to_numpy(dtype=np.float64), s.to_numpy(dtype=np.float64)
        return float(y[0]) if x.size == 1 else float(np.trapezoid(y, x) / (x[-1] - x[0]))
    return float(getattr(s, agg)())


def eval_values(prompts, metrics: Iterable[str]) -> dict[str, float]:
    """The evaluation metrics among `metrics` of one run's per-prompt counts (a PromptTable), as
    ratios of sums exactly as ablate.stats' summary.csv and evaluation's summary.json compute them."""
    want = set(metrics)
    # pass@k and pass^k cost one product per k: compute only the k some wanted metric names
    ks = sorted({int(k) for m in want for k in re.findall(r"pass[@^](\d+)$", m)}) or [1]
    cols = prompts.cols
    out: dict[str, float] = {}
    masks = [("", None)]
    block = prompts.level_block  # the report level's block of the run's task (by_operands for Countdown)
    if "n_numbers" in cols and any(m.startswith(f"{block}/") for m in want):
        masks += [(f"{block}/{j}/", cols["n_numbers"] == j) for j in sorted(set(cols["n_numbers"].astype(int)))]
    for prefix, mask in masks:
        for name, num, den, _, repeated in prompt_ratios(cols, ks):
            full = prefix + name
            if full not in want or (prefix and not repeated):
                continue
            num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
            if mask is not None:
                num, den = num[mask], den[mask]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[full] = float(num.sum() / den.sum())
    return out


_LOOK_PART = re.compile(r"^(.*_look\d+)_\d+$")


def look_of(directory: str) -> str:
    """The look a sweep directory belongs to: `next_look` writes one look whose arms need different
    seed ranges into `<study>_look<N>_<first seed>` directories, one per range; they are one look."""
    m = _LOOK_PART.match(directory)
    return m.group(1) if m else directory


def is_look_part(directory: str) -> bool:
    """Whether a sweep directory is one part of a look (`<study>_look<k>_<first seed>`)."""
    return _LOOK_PART.match(directory) is not None


def run_batches(sweep) -> dict[str, int]:
    """run.rel -> the index of its batch: the sweep directory it came from (the directories of one
    look together, `look_of`, wherever each part lies: one may be held in a committed archive), ordered
    by when its first run started (status.json), so a directory of added seeds is a later look whatever
    order the directories are given in."""
    def started(run) -> str:
        status = run.status or {}
        times = [status.get("started_at")] + [h.get("started_at") for h in status.get("history") or []
                                               if isinstance(h, dict)]
        return min((t for t in times if isinstance(t, str)), default="~")

    first: dict[str, str] = {}
    root_of: dict[str, str] = {}
    for run in sweep.runs:
        root = next((root for root in sweep.roots if _under(run.path, root)), sweep.roots[0])
        # the parts of one look are one batch wherever they lie (one may be held in an archive: --hold)
        i = root_of[run.rel] = look_of(root.name) if is_look_part(root.name) else str(root.parent / root.name)
        first[i] = min(first.get(i, "~"), started(run))
    order = sorted(first, key=lambda i: (first[i], i))
    rank = {i: r for r, i in enumerate(order)}
    return {rel: rank[i] for rel, i in root_of.items()}


def _under(path, root) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def sweep_values(sweep, labels: dict, metrics: Sequence[str], regimes: Sequence[str]) -> pd.DataFrame:
    """The tidy table of `metrics` for every usable run (eval metrics per regime, curve metrics
    under regime `train`). `labels`: condition -> label (names applied)."""
    eval_metrics = [m for m in metrics if not is_curve_metric(m)]
    curve_metrics = [m for m in metrics if _CURVE.match(m)]
    batches = run_batches(sweep)
    rows = []
    for run in sweep.runs:
        if not run.ok:
            continue
        base = {"run": run.rel, "batch": batches.get(run.rel, 0), "condition": labels.get(run.condition, run.label),
                "seed": run.seed}
        for regime in regimes:
            ev = run.evals.get(regime)
            if ev is None or not ev.usable:
                continue
            values = eval_values(ev.prompts, eval_metrics)
            flat = flatten_summary(ev.summary)
            counts = (len(ev.prompts.ids), float(np.sum(ev.prompts.cols["n"])))
            for metric in eval_metrics:
                value = values.get(metric, flat.get(metric, math.nan))
                trials = rate_trials(metric, *counts) if metric in values else math.nan
                rows.append({**base, "regime": regime, "metric": metric, "value": value, "trials": trials})
        for metric in curve_metrics:
            rows.append({**base, "regime": CURVE_REGIME, "metric": metric, "value": curve_value(run.metrics, metric)})
    return pd.DataFrame(rows, columns=[*VALUE_COLUMNS, "trials"])


def reach_values(sweep, labels: dict, metric: str, threshold: float) -> pd.DataFrame:
    """Censored steps (seconds) to reach for every usable run (`reach:COLUMN>=VALUE`, VALUE resolved);
    NaN for a run that does not log COLUMN."""
    target = reach_metric(metric)
    batches = run_batches(sweep)
    rows = []
    for r in (r for r in sweep.runs if r.ok):
        found = first_reach(r.metrics, target.column, target.op, threshold, clock=CPU_COLUMN if target.cpu else None)
        value = math.nan if found is None else found.time_s if target.time else found.step
        rows.append({"run": r.rel, "batch": batches.get(r.rel, 0), "condition": labels.get(r.condition, r.label),
                     "seed": r.seed, "regime": CURVE_REGIME, "metric": metric, "value": value})
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def summary_values(summary: pd.DataFrame, order: list[str] | None = None) -> pd.DataFrame:
    """The tidy table from a committed report's summary.csv (its level=run rows): a re-analysis of
    a published study without its run directories. The batch is the sweep directory in `run` (e.g.
    curriculum_study/3 vs curriculum_study_seeds5_10/0; one look's directories together, `look_of`):
    in `order` (the directories as they were run) when given, else by the smallest seed each holds
    (added seeds continue the numbering)."""
    rows = summary[summary["level"] == "run"].copy()
    rows["dir"] = rows["run"].astype(str).str.rpartition("/")[0].map(look_of)
    first_seed = pd.to_numeric(rows["seed"], errors="coerce").groupby(rows["dir"]).min()
    known = list(dict.fromkeys(map(look_of, order or [])))
    rest = sorted((d for d in first_seed.index if d not in known), key=lambda d: (first_seed[d], d))
    rows["batch"] = rows["dir"].map({d: i for i, d in enumerate(known + rest)})
    if {"n_prompts", "n_samples"} <= set(rows.columns):  # a report written before them has no counts
        rows["trials"] = [rate_trials(m, p, n) for m, p, n in zip(rows["metric"], rows["n_prompts"], rows["n_samples"])]
        return rows[[*VALUE_COLUMNS, "trials"]].reset_index(drop=True)
    return rows[VALUE_COLUMNS].reset_index(drop=True)
