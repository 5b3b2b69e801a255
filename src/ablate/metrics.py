"""Sample-based evaluation metrics shared by evaluation and `ablate.stats` (one definition each):
pass@k (some of k samples correct) and pass^k (all of k samples correct)."""

from __future__ import annotations

import numpy as np


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
