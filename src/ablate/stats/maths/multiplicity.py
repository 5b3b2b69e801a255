"""How a study shares its alpha over its claims: Bonferroni (the default), or a graphical procedure.

Bretz, Maurer, Brannath & Posch (2009), "A graphical approach to sequentially rejective multiple test
procedures", Stat Med 28:586-604. A graph holds, for m claims, initial weights w (w_i >= 0, sum <= 1;
claim i is tested at w_i * alpha) and a transition matrix G (g_ii = 0, rows sum <= 1): when claim j is
rejected its level passes to the others in the proportions g_j., and the graph is updated (their
Algorithm 1):

    w_l <- w_l + w_j g_jl;   g_lk <- (g_lk + g_lj g_jk) / (1 - g_lj g_jl)  (0 where l = k or the
                                                                         denominator is 0)

It controls the familywise error strongly at alpha whatever the graph, and Holm (w_i = 1/m, g = 1/(m-1)),
fixed-sequence (w = e_1, g_i,i+1 = 1) and serial gatekeeping are special cases. With sequential looks
each claim keeps its own spending function and a passed level recomputes its boundaries at every look
(Maurer & Bretz 2013, graphical approaches for group sequential designs): `sequentially_rejective`
takes the test as a callable of (claim, level), so the engine decides a claim's looks at its level.

A study declares it (the claims' `role: primary | secondary`, and `multiplicity:`):

    multiplicity: bonferroni        # today's default: alpha / m to each claim of the family
    multiplicity: holm              # Holm as a graph
    multiplicity: fixed_sequence    # the claims in declared order, each at the full alpha once the last held
    multiplicity: gatekeeping       # primaries share alpha (Holm among them); once every primary is
                                    # replicated, their alpha passes on to the secondaries (Holm among them)
    multiplicity: {weights: {id: w}, transitions: {id: {id: g}}}   # any graph
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

PROCEDURES = ("bonferroni", "holm", "fixed_sequence", "gatekeeping")
ROLES = ("primary", "secondary")
_EPS = 1e-9  # the gatekeeping graph's infinitesimal edge (Bretz 2009, section 4): weight that only flows on


@dataclass(frozen=True)
class Graph:
    ids: tuple[str, ...]
    weights: np.ndarray  # [m]
    transitions: np.ndarray  # [m, m]
    name: str = "graph"


def update(weights: np.ndarray, transitions: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
    """Bretz 2009 Algorithm 1, one step: claim j rejected. Returns the new (weights [m], G [m, m]);
    j's row and column become 0."""
    w, g = np.asarray(weights, dtype=np.float64), np.asarray(transitions, dtype=np.float64)
    w_new = w + w[j] * g[j]
    w_new[j] = 0.0
    num = g + np.outer(g[:, j], g[j])  # g_lk + g_lj g_jk
    den = (1.0 - g[:, j] * g[j, :])[:, None]  # 1 - g_lj g_jl, per row l
    with np.errstate(divide="ignore", invalid="ignore"):
        g_new = np.where(den > 1e-15, num / den, 0.0)
    np.fill_diagonal(g_new, 0.0)
    g_new[j, :] = 0.0
    g_new[:, j] = 0.0
    return w_new, g_new


def sequentially_rejective(test: Callable[[int, float], bool], weights, transitions,
                           alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Bretz 2009's procedure with any level-alpha test per claim: `test(i, level)` says whether claim i
    is rejected at `level`. Returns (rejected [m] bool, each claim's level when it was rejected or, for
    the rest, at the end). Claims are rejected one at a time, the lowest index first among those that
    reject (the result does not depend on the order for consistent tests, Bretz 2009 Theorem 1)."""
    w = np.asarray(weights, dtype=np.float64).copy()
    g = np.asarray(transitions, dtype=np.float64).copy()
    m = w.size
    rejected = np.zeros(m, dtype=bool)
    level = w * alpha
    while True:
        j = next((i for i in range(m) if not rejected[i] and w[i] > 0 and test(i, float(w[i] * alpha))), None)
        if j is None:
            break
        rejected[j] = True
        level[j] = w[j] * alpha
        w, g = update(w, g, j)
        level[~rejected] = w[~rejected] * alpha
    return rejected, level


def graphical_test(p_values: Sequence[float], weights, transitions, alpha: float) -> np.ndarray:
    """The graphical procedure on p-values: claim i rejected when p_i <= w_i alpha at some step."""
    p = np.asarray(p_values, dtype=np.float64)
    return sequentially_rejective(lambda i, a: bool(p[i] <= a), weights, transitions, alpha)[0]


def adjusted_p_values(p_values: Sequence[float], weights, transitions) -> np.ndarray:
    """The graphical procedure's adjusted p-values (Bretz et al. 2009): claim i is rejected at level
    alpha exactly when its adjusted p-value is <= alpha. At each step the claim with the smallest
    p_j / w_j is rejected, its adjusted value is that ratio (at least the previous one's, at most 1),
    and the graph is updated as `sequentially_rejective` updates it. The ratio is taken exactly, with
    each weight read as the fraction it stands for (`_as_fraction`: Holm's 1/(m - k), not its float),
    so Holm's graph gives Holm's step-down values to the last bit: min(1, max_k<=i (m - k + 1) p_(k))."""
    p = np.asarray(p_values, dtype=np.float64)
    w, g = np.asarray(weights, dtype=np.float64), np.asarray(transitions, dtype=np.float64)
    adjusted = np.ones(p.size)
    done = np.zeros(p.size, dtype=bool)
    floor = Fraction(0)
    while (live := np.flatnonzero(~done & (w > 0))).size:
        ratio = p[live] / w[live]
        near = live[ratio <= ratio.min() * (1 + 1e-9)]  # decided exactly: floats may misorder near-ties
        exact = {int(i): Fraction(p[i]) / _as_fraction(w[i]) for i in near}
        j = min(exact, key=exact.get)  # the lowest index among ties
        floor = max(floor, min(Fraction(1), exact[j]))
        adjusted[j], done[j] = float(floor), True
        w, g = update(w, g, j)
    return adjusted  # a claim no weight reaches stays at 1


def _as_fraction(x: float) -> Fraction:
    """x as the fraction with a denominator up to 10^6 it is a rounding of (1/3 for 0.333...), else as
    the float it is (the gatekeeping graph's epsilon edges stay themselves)."""
    near = Fraction(x).limit_denominator(10**6)
    return near if abs(float(near) - x) <= 1e-12 * abs(x) else Fraction(x)


def holm_adjusted(p_values: Sequence[float], alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm over the finite entries of p_values, as a graph (the claims' procedure, `holm`'s weights):
    (rejected, adjusted p-values), each of the input's shape. Rejected is adjusted <= alpha, so the two
    columns a table shows never disagree; a NaN p-value stays NaN and is never rejected."""
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        adjusted[ok] = adjusted_p_values(p[ok], *holm(int(ok.sum())))
    return np.where(ok, adjusted <= alpha, False), adjusted


def holm(m: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.full((m, m), 1.0 / (m - 1)) if m > 1 else np.zeros((m, m))
    np.fill_diagonal(g, 0.0)
    return np.full(m, 1.0 / m), g


def fixed_sequence(m: int) -> tuple[np.ndarray, np.ndarray]:
    w, g = np.zeros(m), np.zeros((m, m))
    if m:
        w[0] = 1.0
    for i in range(m - 1):
        g[i, i + 1] = 1.0
    return w, g


def gatekeeping(primary: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Primaries share alpha equally and pass a rejected one's level to the other primaries (Holm among
    them) with an infinitesimal edge to the secondaries, so the last primary rejected passes all of it
    on; secondaries then Holm among themselves (Bretz 2009, section 4's epsilon edges)."""
    prim = np.asarray(primary, dtype=bool)
    k = int(prim.sum())
    m = prim.size
    w = np.where(prim, 1.0 / max(k, 1), 0.0)
    g = np.zeros((m, m))
    for i in range(m):
        same = [j for j in range(m) if j != i and prim[j] == prim[i]]
        later = [j for j in range(m) if prim[i] and not prim[j]]
        if prim[i] and same and later:
            g[i, same] = (1.0 - _EPS) / len(same)
            g[i, later] = _EPS / len(later)
        elif same:
            g[i, same] = 1.0 / len(same)
        elif later:
            g[i, later] = 1.0 / len(later)
    if k == 0:  # no primary declared: Holm over all
        return holm(m)
    return w, g


def parse_multiplicity(raw: Any, claims, problems: list[str]) -> Graph | None:
    """The declared procedure over the family's claims (None: Bonferroni, today's default)."""
    ids = tuple(c.id for c in claims)
    m = len(ids)
    if raw is None or raw == "bonferroni" or m == 0:
        return None
    if isinstance(raw, str):
        if raw not in PROCEDURES:
            problems.append(f"multiplicity must be one of {', '.join(PROCEDURES)} or a mapping with weights and "
                            f"transitions, got {raw!r}")
            return None
        if raw == "holm":
            w, g = holm(m)
        elif raw == "fixed_sequence":
            w, g = fixed_sequence(m)
        else:
            roles = [getattr(c, "role", "") for c in claims]
            if "primary" not in roles:
                problems.append("multiplicity: gatekeeping needs at least one claim with role: primary")
                return None
            w, g = gatekeeping([r == "primary" for r in roles])
        return Graph(ids, w, g, raw)
    if not isinstance(raw, Mapping) or "weights" not in raw:
        problems.append(f"multiplicity must name a procedure or give weights (and transitions), got {raw!r}")
        return None
    w, g = np.zeros(m), np.zeros((m, m))
    index = {c: i for i, c in enumerate(ids)}
    for key, value in (raw.get("weights") or {}).items():
        if key not in index:
            problems.append(f"multiplicity.weights: {key!r} is no claim of the family ({', '.join(ids)})")
            continue
        w[index[key]] = float(value)
    for src, row in (raw.get("transitions") or {}).items():
        for dst, value in (row or {}).items():
            if src not in index or dst not in index or src == dst:
                problems.append(f"multiplicity.transitions: {src!r} -> {dst!r} must join two different claims "
                                f"of the family")
                continue
            g[index[src], index[dst]] = float(value)
    if (w < 0).any() or w.sum() > 1 + 1e-9:
        problems.append(f"multiplicity.weights must be >= 0 and sum to at most 1, got {w.sum():g}")
    if (g < 0).any() or (g.sum(axis=1) > 1 + 1e-9).any():
        problems.append("multiplicity.transitions: every claim's outgoing weights must be >= 0 and sum to at most 1")
    return Graph(ids, w, g, "graph")
