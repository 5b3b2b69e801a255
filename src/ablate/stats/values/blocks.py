"""Per-prompt metric blocks: every metric of one run in one regime as per-prompt numerators and
denominators (ratios of sums, so prompts can be resampled), from ablate.metrics' one table."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ablate.metrics import prompt_ratios
from ablate.stats.read.runs import PromptTable

KS = (1, 2, 4, 8, 16)
# summary.json numbers that equal a recomputed metric, or are bookkeeping, not results. The other numbers
# are shown next to the recomputed ones (`reported`); as both come from ablate.metrics' one table, a
# difference above AGREEMENT_TOL means the files disagree (summary.json edited or from another version).
_NOT_SUMMARY_METRICS = re.compile(
    r"^(regime|n_prompts|n_samples|verdicts/.*|verdict_rate/.*|by_[^/]+/[^/]+/(n_prompts|n_samples))$")
AGREEMENT_TOL = 1e-4


@dataclass
class MetricBlock:
    """Per-prompt numerators and denominators of every metric of one run in one regime."""

    ids: np.ndarray
    names: list[str]
    num: np.ndarray  # (P, M)
    den: np.ndarray  # (P, M)
    # per metric, the (successes, trials) sample counts a Wilson interval uses, or None
    wilson: list[tuple[np.ndarray, np.ndarray] | None]

    def take(self, names: Sequence[str]) -> "MetricBlock":
        idx = [self.names.index(n) for n in names]
        return MetricBlock(self.ids, list(names), self.num[:, idx], self.den[:, idx],
                           [self.wilson[i] for i in idx])

    def rows_for(self, ids: np.ndarray) -> np.ndarray:
        where = {pid: i for i, pid in enumerate(self.ids)}
        return np.asarray([where[pid] for pid in ids], dtype=np.int64)


def prompt_metrics(t: PromptTable, ks: Sequence[int] = KS) -> MetricBlock:
    """Every metric of `ablate.metrics.prompt_ratios` (the table evaluation sums into summary.json) as
    per-prompt num/den, and <level block>/<j>/<metric> for the prompts at report level j (Countdown:
    by_operands/<j>/, the prompts with j numbers)."""
    names, nums, dens, wilson = [], [], [], []
    n, c = t.cols["n"], t.cols["n_correct"]
    # with the same n for every prompt, the mean of c/n is the sample success rate: Wilson applies
    sample_rate = (c, n) if bool(np.all(n == n[0])) else None
    ratios = prompt_ratios(t.cols, ks)
    masks = [(None, None)]
    if "n_numbers" in t.cols:
        # restricting a ratio of sums to a subset of prompts = zeroing the others' terms
        masks += [(f"{t.level_block}/{j}/", (t.cols["n_numbers"] == j).astype(np.float64))
                  for j in sorted(set(t.cols["n_numbers"].astype(int).tolist()))]
    for prefix, mask in masks:
        for name, num, den, kind, repeated in ratios:
            if prefix is not None and not repeated:
                continue
            counts = (num, den) if kind == "counts" else sample_rate if kind == "samples" else None
            if mask is not None:
                num, den = num * mask, den * mask
                counts = None if counts is None else (counts[0] * mask, counts[1] * mask)
            names.append((prefix or "") + name)
            nums.append(np.asarray(num, dtype=np.float64))
            dens.append(np.asarray(den, dtype=np.float64))
            wilson.append(counts)
    return MetricBlock(t.ids, names, np.stack(nums, axis=1), np.stack(dens, axis=1), wilson)


def flatten_summary(summary: dict | None, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if not isinstance(summary, dict):
        return out
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_summary(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def metric_sort_key(name: str):
    m = re.fullmatch(r"pass@(\d+)", name)
    if m:
        return (0, int(m.group(1)), name)
    m = re.fullmatch(r"pass\^(\d+)", name)
    if m:
        return (0.5, int(m.group(1)), name)
    order = ["exact_pass@1", "coverage", "precision", "mixed_fraction", "best_of_n", "mean_response_length"]
    if name in order:
        return (1, order.index(name), name)
    parts = name.split("/")
    if parts[0].startswith("by_") and len(parts) == 3:
        return (3, int(parts[1]) if parts[1].isdigit() else 0, metric_sort_key(parts[2]), name)
    for rank, pre in enumerate(["verdict_rate/", "tool/"]):
        if name.startswith(pre):
            return (2 + 2 * rank, 0, name)
    return (9, 0, name)




def available_metrics(usable: dict, regimes: Sequence[str]) -> list[str]:
    """Every metric name some usable run has, cheaply (no resampling)."""
    names: set[str] = set()
    for runs in usable.values():
        for run in runs:
            for regime in regimes:
                ev = run.evals.get(regime)
                if ev is None or not ev.usable:
                    continue
                names |= set(prompt_metrics(ev.prompts).names)
                names |= {k for k in flatten_summary(ev.summary) if not _NOT_SUMMARY_METRICS.match(k)}
    return sorted(names, key=metric_sort_key)


