"""The evaluation metrics, one definition each, for evaluation (`ablate.eval.summarize`) and
`ablate.stats` (per-prompt statistics) alike.

Every metric is a ratio of sums over prompts, sum(num) / sum(den), of per-prompt numerators and
denominators computed from a prompt's sample counts (`samples.jsonl` columns: n samples, n_correct,
n_answered, mean_length, per-verdict counts, tool counts). `prompt_ratios` is the table: evaluation
sums it over a set of prompts into `summary.json`; stats resamples the same per-prompt terms.
pass@k (some of k samples correct) and pass^k (all of k samples correct) are the two estimators below.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

# The evaluation regimes (eval/<regime>/ in a run directory): without the tool, and with the run's tool
# answering. Defined once here, where the metrics that fill those directories are.
REGIME_NO_TOOL, REGIME_TOOL = "no_tool", "tool"
REGIMES = (REGIME_NO_TOOL, REGIME_TOOL)

Columns = Mapping[str, np.ndarray]
# (name, per-prompt numerator, per-prompt denominator, what a Wilson interval counts, repeated by operand count)
Ratio = tuple[str, np.ndarray, np.ndarray, "str | None", bool]


def prompt_ratios(cols: Columns, ks) -> list[Ratio]:
    """The metric table: every metric the columns allow, as per-prompt (num, den).

    `cols` holds arrays over prompts: n and n_correct always; n_answered, mean_length, tool_calls,
    n_calc and `verdict/<name>` counts when known. pass@k and pass^k are given for the k in `ks` that
    every prompt has samples for. The Wilson entry says which binomial counts an interval is over:
    "counts" (num and den are successes and trials), "samples" (n_correct of n samples: a rate over
    samples only where every prompt has the same n), None (no binomial rate). The flag marks the
    metrics that are also reported per operand count (`by_operands/<j>/<name>`).
    """
    n, c = cols["n"], cols["n_correct"]
    ones = np.ones(np.shape(n))
    ks = [int(k) for k in ks if int(k) <= int(np.min(n))]
    out: list[Ratio] = [(f"pass@{k}", pass_at_k(n, c, k), ones, "samples" if k == 1 else None, True) for k in ks]
    out += [(f"pass^{k}", pass_hat_k(n, c, k), ones, "samples" if k == 1 else None, True) for k in ks]
    out.append(("exact_pass@1", c / n, ones, "samples", True))  # mean over prompts of the correct share
    if "n_answered" in cols:
        out.append(("coverage", cols["n_answered"], n, "counts", True))  # samples with an answer
        out.append(("precision", c, cols["n_answered"], "counts", True))  # correct among answered
    # prompts with some but not all samples correct: the ones that give RLOO a gradient
    out.append(("mixed_fraction", ((c > 0) & (c < n)).astype(np.float64), ones, "counts", True))
    # a correct sample among the n: best-of-n with the verifier as the selector (= pass@n)
    out.append(("best_of_n", (c > 0).astype(np.float64), ones, "counts", True))
    if "mean_length" in cols:  # sample-weighted mean response length in tokens
        out.append(("mean_response_length", cols["mean_length"] * n, n, None, True))
    out += [(f"verdict_rate/{key.split('/', 1)[1]}", col, n, "counts", False)
            for key, col in cols.items() if key.startswith("verdict/")]
    if "tool_calls" in cols:  # tool answers spliced in, per sample
        out.append(("tool/calls_per_rollout", cols["tool_calls"], n, None, False))
    if "n_calc" in cols:  # samples that write <calc> at all
        out.append(("tool/calc_emission_rate", cols["n_calc"], n, "counts", False))
    return out


def pass_at_k(n, c, k: int):
    """Unbiased pass@k of Chen et al. (2021) from `n` samples of which `c` are correct.

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomial
    coefficients of the textbook formula. `n` and `c` may be scalars (a float comes back) or
    broadcastable integer arrays (an array comes back). Returns 1.0 where n - c < k (every
    size-k subset holds a correct sample). k > n is an error rather than a silent 1.0: pass@k
    is not estimable from fewer than k samples.
    """
    k, scalar, n_arr, c_arr = _sample_counts(n, c, k, "pass@")

    flat_n = n_arr.ravel()
    flat_c = c_arr.ravel()
    out = np.ones(flat_n.shape, dtype=np.float64)
    todo = (flat_n - flat_c) >= k
    if np.any(todo):
        nn = flat_n[todo][:, None]
        cc = flat_c[todo][:, None]
        width = int(cc.max()) if cc.size else 0
        j = np.arange(width)[None, :]
        # Row r multiplies (1 - k/i) for i = n-c+1 .. n; padding factors are 1.
        i = nn - cc + 1 + j
        factors = np.where(j < cc, 1.0 - k / np.maximum(i, 1), 1.0)
        out[todo] = 1.0 - np.prod(factors, axis=1)
    out = out.reshape(n_arr.shape)
    return float(out) if scalar else out


def pass_hat_k(n, c, k: int):
    """Unbiased pass^k ("pass hat k", Yao et al. 2024, tau-bench; prime-rl logs it): the probability that
    k samples drawn without replacement from the n are all correct, C(c, k) / C(n, k).

    The product form prod_{i=0}^{k-1} (c - i) / (n - i) never forms the binomials; it is 0 where c < k.
    pass^1 = c / n = pass@1; pass^k falls with k where pass@k rises, so the pair separates a policy
    that solves a prompt reliably from one that solves it sometimes. Same inputs, broadcasting and
    errors as `pass_at_k`.
    """
    k, scalar, n_arr, c_arr = _sample_counts(n, c, k, "pass^")
    i = np.arange(k)
    factors = (c_arr[..., None] - i) / (n_arr[..., None] - i)
    out = np.prod(np.maximum(factors, 0.0), axis=-1)  # a factor is 0 at i = c: the product is 0 for c < k
    return float(out) if scalar else out


def _sample_counts(n, c, k, name: str) -> tuple[int, bool, np.ndarray, np.ndarray]:
    """(k, whether n and c are scalars, n and c as broadcast int64 arrays), after the checks both
    estimators need: k >= 1, whole counts, 0 <= c <= n, and at least k samples per prompt."""
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scalar = np.ndim(n) == 0 and np.ndim(c) == 0
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    if not (np.issubdtype(n_arr.dtype, np.integer) or _is_whole(n_arr)):
        raise ValueError("n must hold whole numbers")
    if not (np.issubdtype(c_arr.dtype, np.integer) or _is_whole(c_arr)):
        raise ValueError("c must hold whole numbers")
    n_arr = n_arr.astype(np.int64)
    c_arr = c_arr.astype(np.int64)
    if np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise ValueError("need 0 <= c <= n")
    if np.any(n_arr < k):
        raise ValueError(f"{name}{k} needs at least {k} samples per prompt (smallest n is {n_arr.min()})")
    return k, scalar, n_arr, c_arr


def _is_whole(a: np.ndarray) -> bool:
    try:
        f = a.astype(np.float64)
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.isfinite(f)) and np.all(f == np.round(f)))
