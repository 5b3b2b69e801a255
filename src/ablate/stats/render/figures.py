"""The report's figures (PNG). Each draws columns of the analysis' tables and computes no statistic
(the performance profiles too: ablate.stats.stages.robust computes them in the analysis)."""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ablate.rundir.metrics_csv import VAL
from ablate.stats.render.formatting import pct, slug, twins

if TYPE_CHECKING:
    from ablate.stats.claims.engine import ClaimsResult
    from ablate.stats.stages.compare import Comparisons
    from ablate.stats.stages.conditions import Conditions
    from ablate.stats.stages.curves import Curves
    from ablate.stats.stages.summary import Summary

CURVES_PER_FIGURE = 12
MAX_CURVE_FIGURES = 3
FLAT = 0.005  # a panel whose means span less than this share of its scale is dropped (figures.moves)
PROFILES_PER_FIGURE = 6
# metrics.csv columns that are rates or shares: their bands are clipped to [0, 1]
_UNIT = re.compile(r"(pass[@^]|_rate|rate/|frac|coverage|precision|mixed|best_of|accuracy|share|p_available)")
_NON_NEGATIVE = re.compile(r"(_s$|length|tokens|count|calls|steps|/n_)")
VERDICT_COLOURS = {"replicated": "#2b8a3e", "not replicated": "#c92a2a", "inconclusive": "#e67700",
                   "not testable": "#868e96", "descriptive": "#1c7ed6"}


@dataclass(frozen=True)
class Canvas:
    """Where and how every figure draws: the report directory, pyplot, the conditions' order and the
    confidence its intervals were computed at (for the titles)."""

    out: Path
    plt: Any
    order: list[str]
    confidence: float

    @property
    def pct(self) -> str:
        return pct(self.confidence)


def make_figures(out: Path, conditions: Conditions, summary: Summary, comparisons: Comparisons, curves: Curves,
                 claims: ClaimsResult | None) -> list[tuple[str, str]]:
    """Every figure of the report, written under `out`; (title, file name) of each. Read: from
    `conditions` the conditions' order, the regimes, the confidence and the study's name; from `summary`
    summary.csv's condition rows and the performance profiles; `comparisons.table`; `curves.table`; the
    claims' table (None: no claims). Each figure is handed only the table it draws."""
    import matplotlib  # heavy: matplotlib, imported when plots are drawn (not under --no-plots)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # order: pyplot after the Agg backend is chosen

    c = conditions
    canvas = Canvas(out, plt, [c.labels[k] for k in c.labels], c.settings.confidence)
    figures: list[tuple[str, str]] = []
    if claims is not None and len(claims.table):
        name = "claims.png"
        claims_figure(claims.table, out / name, title=f"claims of {c.study.name}" if c.study else "claims")
        figures.append(("claims (estimate and deciding interval; the paper's effect as ×)", name))
    cond_rows = summary.table[summary.table["level"] == "condition"]
    for regime in c.regimes:
        rows = cond_rows[cond_rows["regime"] == regime]
        figures += [found for found in (_passk_figure(rows, regime, canvas), _operands_figure(rows, regime, canvas),
                                        _differences_figure(comparisons.table, regime, canvas)) if found]
    figures += [found for regime in c.regimes if (found := _profile_figure(summary.profiles, regime, canvas))]
    claimed = claimed_columns(claims.table) if claims is not None else []
    return figures + _curve_figures(curves.table, claimed, canvas)


def _claim_points(r: dict) -> tuple[float, float, float, list[float]]:
    lo, hi, est = (float(r[k]) if pd.notna(r[k]) else math.nan for k in ("ci_low", "ci_high", "estimate"))
    points = [v for v in (lo, hi, est, float(r["paper"]) if pd.notna(r["paper"]) else math.nan, 0.0)
              if math.isfinite(v)]
    return lo, hi, est, points


def _draw_claim(ax, r: dict, y: float, filled: bool) -> list[float]:
    """One claim's interval and estimate at height y (hollow: the exploratory realisation)."""
    colour = VERDICT_COLOURS.get(r["verdict"], "black")
    lo, hi, est, points = _claim_points(r)
    if math.isfinite(lo) and math.isfinite(hi):
        ax.hlines(y, lo, hi, color=colour, lw=3 if filled else 2, linestyles="solid" if filled else "dotted")
    if math.isfinite(est):
        ax.plot([est], [y], "o", color=colour, ms=6, mfc=colour if filled else "white")
    return points


def claims_figure(table: pd.DataFrame, path: Path, title: str = "claims",
                  confirmatory: pd.DataFrame | None = None) -> None:
    """A forest of the claims, one panel each (claims have their own units): the estimate and its
    deciding interval coloured by verdict, the paper's one-seed effect as ×, 0 as a line, the
    equivalence or non-inferiority margin shaded. With `confirmatory` (the same claims decided on fresh,
    registered seeds), each panel shows both: exploratory hollow and dotted above, confirmatory below."""
    import matplotlib  # heavy: matplotlib, imported when plots are drawn (not under --no-plots)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # order: pyplot after the Agg backend is chosen

    rows = table.to_dict("records")
    second = {} if confirmatory is None else {r["id"]: r for r in confirmatory.to_dict("records")}
    fig, axes = plt.subplots(len(rows), 1, figsize=(8.5, (1.0 if second else 0.72) * len(rows) + 0.9), squeeze=False)
    for ax, r in zip(axes[:, 0], rows):
        other = second.get(r["id"])
        points = _draw_claim(ax, r, 0.25 if other else 0.0, filled=other is None)
        points += _draw_claim(ax, other, -0.25, filled=True) if other else []
        margin = float(r["margin"]) if pd.notna(r["margin"]) else math.nan
        if math.isfinite(margin):
            ax.axvspan(-margin, margin if r["type"] == "equivalence" else max(points + [margin]),
                       color="#dee2e6", alpha=0.6, lw=0, zorder=0)
            points += [-margin, margin]
        ax.axvline(0, color="grey", lw=0.8)
        if pd.notna(r["paper"]):
            ax.plot([float(r["paper"])], [0], "x", color="black", ms=8, mew=2)
        span = (max(points) - min(points)) or 1.0
        ax.set_xlim(min(points) - 0.08 * span, max(points) + 0.08 * span)
        ax.set_ylim(-0.6, 0.6)
        ax.set_yticks([])
        ax.tick_params(labelsize=7)
        ax.set_title(textwrap.shorten(f"{r['id']}: {r['claim']}", 95), fontsize=7.5, loc="left")
        for y, row, tag in ((0.25, r, "expl. "), (-0.25, other, "conf. ")) if other else ((0.5, r, ""),):
            ax.text(1.01, y if other else 0.5, tag + row["verdict"], transform=ax.transAxes if not other else
                    ax.get_yaxis_transform(), color=VERDICT_COLOURS.get(row["verdict"], "black"), fontsize=8,
                    va="center", fontweight="bold")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.84, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _passk_figure(rows: pd.DataFrame, regime: str, c: Canvas):
    passk = rows[rows["metric"].str.fullmatch(r"pass@\d+")]
    if not len(passk):
        return None
    fig, ax = c.plt.subplots(figsize=(6, 4))
    labels = [label for label in c.order if label in set(passk["condition"])]
    for i, label in enumerate(labels):
        r = passk[passk["condition"] == label].copy()
        r["k"] = r["metric"].str.split("@").str[1].astype(int)
        r = r.sort_values("k")
        jitter = 1.0 + 0.03 * (i - (len(labels) - 1) / 2)
        ax.errorbar(r["k"] * jitter, r["value"], yerr=_yerr(r), marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ks = sorted(set(passk["metric"].str.split("@").str[1].astype(int)))
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_title(f"pass@k, regime {regime} (mean over seeds, {c.pct} CI)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    name = f"passk_{slug(regime)}.png"
    _save(fig, c.out / name, c.plt)
    return f"pass@k — {regime}", name


def _operands_figure(rows: pd.DataFrame, regime: str, c: Canvas):
    ops = rows[rows["metric"].str.fullmatch(r"by_operands/[^/]+/pass@1")]
    if not len(ops):
        ops = rows[rows["metric"].str.fullmatch(r"by_operands/[^/]+/exact_pass@1")]
    if not len(ops):
        return None
    fig, ax = c.plt.subplots(figsize=(6, 4))
    ops = ops.copy()
    ops["ops"] = ops["metric"].str.split("/").str[1]
    groups = sorted(set(ops["ops"]), key=lambda x: (len(x), x))
    labels = [label for label in c.order if label in set(ops["condition"])]
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        r = ops[ops["condition"] == label].set_index("ops").reindex(groups)
        x = np.arange(len(groups)) + (i - (len(labels) - 1) / 2) * width
        ax.bar(x, r["value"], width, yerr=_yerr(r), capsize=3, label=label)
    ax.set_xticks(np.arange(len(groups)), [f"{g} numbers" for g in groups])
    metric = ops["metric"].iloc[0].split("/")[-1]
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by operand count, regime {regime}", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    name = f"operands_{slug(regime)}.png"
    _save(fig, c.out / name, c.plt)
    return f"by operand count — {regime}", name


def _differences_figure(comparisons: pd.DataFrame, regime: str, c: Canvas):
    cmp = comparisons[comparisons["regime"] == regime] if len(comparisons) else comparisons
    cmp = cmp[np.isfinite(cmp["diff_ci_low"].astype(float))] if len(cmp) else cmp
    if not len(cmp):
        return None
    fig, ax = c.plt.subplots(figsize=(6, 1.2 + 0.45 * len(cmp)))
    y = np.arange(len(cmp))[::-1]
    d = cmp["diff"].to_numpy(float)
    err = np.vstack([d - cmp["diff_ci_low"].to_numpy(float), cmp["diff_ci_high"].to_numpy(float) - d])
    ax.errorbar(d, y, xerr=np.clip(err, 0, None), fmt="o", capsize=3)
    ax.axvline(0, color="grey", lw=1)
    ax.set_yticks(y, [f"{cond} · {m}" for cond, m in zip(cmp["condition"], cmp["metric"])])
    bases = sorted(set(cmp["baseline"]))
    ax.set_xlabel(f"difference from baseline ({bases[0]})" if len(bases) == 1
                  else "difference from each family's baseline")
    ax.set_title(f"differences, regime {regime} ({c.pct} Welch CI over seeds)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    name = f"differences_{slug(regime)}.png"
    _save(fig, c.out / name, c.plt)
    return f"differences from baseline — {regime}", name


def _profile_figure(profiles: pd.DataFrame | None, regime: str, c: Canvas) -> tuple[str, str] | None:
    """rliable's performance profile per compared metric, as the analysis computed it (ablate.stats.stages.robust):
    the fraction of a condition's runs whose value is above tau, over tau, with its bootstrap band."""
    rows = profiles[profiles["regime"] == regime] if profiles is not None else None
    if rows is None or not len(rows):
        return None
    metrics = list(dict.fromkeys(rows["metric"]))[:PROFILES_PER_FIGURE]
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig, axes = c.plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows + 0.6), squeeze=False)
    for ax, metric in zip(axes.ravel(), metrics):
        sub = rows[rows["metric"] == metric]
        for label in [label for label in c.order if label in set(sub["condition"])]:
            r = sub[sub["condition"] == label]
            taus, low, high = r["tau"].to_numpy(float), r["low"].to_numpy(float), r["high"].to_numpy(float)
            line, = ax.step(taus, r["fraction"].to_numpy(float), where="post", lw=1.3,
                            label=f"{label} ({int(r['n_runs'].iloc[0])})")
            if np.isfinite(low).any():
                ax.fill_between(taus, low, high, step="post", color=line.get_color(), alpha=0.15, lw=0)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("τ", fontsize=8)
        ax.set_ylabel("fraction of runs > τ", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(metrics):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"performance profiles, {regime}\n(runs per condition; {c.pct} bootstrap band)", fontsize=9)
    name = f"profile_{slug(regime)}.png"
    _save(fig, c.out / name, c.plt)
    return f"performance profiles — {regime}", name


def moves(means: np.ndarray, metric: str) -> bool:
    """Whether a curve panel shows anything: its condition means span at least FLAT of the metric's
    scale (1 for a rate or share, else the largest magnitude it takes). Coverage between 0.9965 and 1
    is a flat line a reader cannot see move."""
    means = means[np.isfinite(means)]
    if not means.size:
        return False
    scale = 1.0 if _UNIT.search(metric) else float(np.abs(means).max())
    return bool(np.ptp(means) > 0 and np.ptp(means) >= FLAT * scale)


def claimed_columns(claims_table: pd.DataFrame) -> list[str]:
    """The metrics.csv columns the claims' curve summaries and reaches read."""
    return [column for metric in claims_table["metric"] for column in
            re.findall(r"(?:final|mean|max|min|auc|slope|reach(?:_time)?):([^@<>=\s]+)", str(metric))]


def curve_order(curves: pd.DataFrame, metrics: list[str], wanted: list[str] = ()) -> dict[str, list[str]]:
    """The panels to draw, deciding metrics first: the columns the study's claims read (`wanted`), then
    val/, then the rest; each with the metrics its panel also stands for (`same_curves`). A panel that
    does not move (`moves`) is dropped unless a claim reads it (a flat deciding curve is a finding)."""
    shown = []
    for m in metrics:
        means = curves.loc[curves["metric"] == m, "mean"].to_numpy(float)
        if (m in wanted and np.isfinite(means).any()) or moves(means, m):
            shown.append(m)
    # sorted, not list.sort: the key reads shown's order, which list.sort empties while it runs
    return same_curves(curves, sorted(shown, key=lambda m: (m not in wanted, not m.startswith(VAL), shown.index(m))))


def same_curves(curves: pd.DataFrame, metrics: list[str]) -> dict[str, list[str]]:
    """Each metric kept -> the later metrics whose curves are the same point for point (formatting.twins)."""
    keys = {}
    for m in metrics:
        sub = curves[curves["metric"] == m].sort_values(["condition", "step"])
        keys[m] = tuple(zip(sub["condition"], sub["step"], sub["mean"].round(12)))
    return twins(keys)


def _curve_figures(curves: pd.DataFrame, wanted: list[str], c: Canvas) -> list[tuple[str, str]]:
    if not len(curves):
        return []
    panels = curve_order(curves, list(dict.fromkeys(curves["metric"])), wanted)
    titles = {m: " = ".join([m, *same]) for m, same in panels.items()}
    metrics = list(panels)
    held_out = [m for m in metrics if m.startswith(VAL)]
    training = [m for m in metrics if not m.startswith(VAL)]
    figures = []
    if held_out:
        figures.append(_curve_figure(curves, held_out[:CURVES_PER_FIGURE], "val_curves",
                                     "held-out evaluation during training", titles, c))
    chunks = [training[i:i + CURVES_PER_FIGURE] for i in range(0, len(training), CURVES_PER_FIGURE)]
    for n, chunk in enumerate(chunks[:MAX_CURVE_FIGURES], 1):
        name = "curves" if len(chunks) == 1 else f"curves_{n}"
        title = "training curves" + ("" if len(chunks) == 1 else f" ({n})")
        figures.append(_curve_figure(curves, chunk, name, title, titles, c))
    return figures


def band_limits(metric: str) -> tuple[float, float]:
    """The range a curve's band is clipped to: a rate lies in [0, 1], a time or count is >= 0."""
    if _UNIT.search(metric):
        return 0.0, 1.0
    if _NON_NEGATIVE.search(metric):
        return 0.0, math.inf
    return -math.inf, math.inf


def _curve_figure(curves: pd.DataFrame, chunk: list[str], name: str, title: str, titles: dict[str, str],
                  c: Canvas) -> tuple[str, str]:
    cols = min(3, len(chunk))
    nrows = math.ceil(len(chunk) / cols)
    height = 2.8 * nrows + 0.3  # the panels, and a strip of fixed height for the one-line suptitle
    fig, axes = c.plt.subplots(nrows, cols, figsize=(4.2 * cols, height), squeeze=False)
    for ax, metric in zip(axes.ravel(), chunk):
        sub = curves[curves["metric"] == metric]
        low_limit, high_limit = band_limits(metric)
        for label in [label for label in c.order if label in set(sub["condition"])]:
            r = sub[sub["condition"] == label]
            sparse = metric.startswith(VAL)
            line, = ax.plot(r["step"], r["mean"], lw=1.2, label=label, marker="o" if sparse else None, ms=3)
            ax.fill_between(r["step"], r["ci_low"].clip(low_limit, high_limit), r["ci_high"].clip(low_limit, high_limit),
                            color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title("\n".join(textwrap.wrap(titles.get(metric, metric), 40)), fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(chunk):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    # pinned in inches from the top edge: matplotlib's default y=0.98 is a share of the height
    fig.suptitle(f"{title} (mean over seeds, {c.pct} t-interval band, clipped to the metric's range)", fontsize=10,
                 y=1 - 0.08 / height, va="top")
    _save(fig, c.out / f"{name}.png", c.plt)
    return title, f"{name}.png"


def _yerr(r: pd.DataFrame) -> np.ndarray:
    v = r["value"].to_numpy(float)
    lo = r["ci_low"].to_numpy(float)
    hi = r["ci_high"].to_numpy(float)
    err = np.vstack([v - lo, hi - v])
    return np.nan_to_num(np.clip(err, 0, None))


def _save(fig, path: Path, plt) -> None:
    # tight_layout sets the panels below the suptitle's own extent, so titles are never cut off; a
    # rect reserved for it as well left a second strip of white above every grid
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
