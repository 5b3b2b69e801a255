"""`python -m ablate.studies.calibrate`: the error rates of the verdict engine, measured.

Plants sweeps of run directories with a known truth and runs the claims engine on each, the code
path `python -m ablate.stats` runs from a loaded sweep (`analysis.claims_of`): the sweeps are built in
memory as the loader builds them, and `--on-disk K` also writes the first K of each setting as run
directories (the run-directory contract) and checks the CLI's claims.csv gives the same verdicts.

The planted model, per setting: 500 test prompts shared by every run (difficulty b_p ~ N(0, 1.5) on
the logit scale around pass@1 0.35), 16 samples each; each seed's model is shifted overall (u_s ~
N(0, sigma_seed)) and prompt by prompt (v_sp ~ N(0, sigma_int)); arm B adds a logit shift solved
so that the recipe's expected pass@1 on these prompts is higher by exactly `effect`. One declared
superiority claim (B higher than A on pass@1). `small` seed variance: sigma_seed 0.02, sigma_int 0.5
(prompt noise dominates, seed SD of pass@1 ~0.006); `large`: sigma_seed 0.15 (seed SD ~0.024).

Printed per setting: the realised seed SD, the rate at which the deciding interval excludes 0
(false positives at effect 0, power otherwise), the coverage of the true effect, and with `--old`
the procedure the engine replaced (hierarchical-bootstrap interval; paired prompt permutation test).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.special
import yaml
from tqdm import tqdm

from ablate.metrics import REGIME_NO_TOOL
from ablate.rundir import RunDir
from ablate.rundir.atomic import write_json, write_text
from ablate.stats.maths.intervals import hierarchical_bootstrap_distribution, percentile_interval
from ablate.stats.maths.paired import _permutation_p
from ablate.stats.maths.power import seeds_needed
from ablate.stats.read.runs import PromptTable, RegimeEval, Run, Sweep
from ablate.stats.stages.analysis import claims_of

VARIANCE = {"small": (0.02, 0.5), "large": (0.15, 0.5)}
N_PROMPTS, N_SAMPLES, BASE = 500, 16, 0.35
_GH = np.polynomial.hermite_e.hermegauss(40)  # nodes and weights for E[f(Z)], Z ~ N(0, 1)


@dataclass(frozen=True)
class Setting:
    seeds_a: int
    seeds_b: int
    variance: str = "small"
    effect: float = 0.0
    looks: tuple[int, ...] = ()  # a sequential plan (seeds per arm per look); () = one fixed look
    spending: str = "pocock"

    @property
    def name(self) -> str:
        n = f"plan {'/'.join(map(str, self.looks))} {self.spending}" if self.looks else (
            f"{self.seeds_a}" if self.seeds_a == self.seeds_b else f"{self.seeds_a} vs {self.seeds_b}")
        return f"{n}, {self.variance}, Δ={self.effect:g}"


def _difficulty(prompt_seed: int = 7) -> np.ndarray:
    return np.random.default_rng(prompt_seed).normal(0.0, 1.5, N_PROMPTS)


def expected_pass1(shift: float, difficulty: np.ndarray, sigma: float) -> float:
    """E over seeds of mean over prompts of sigmoid(logit(BASE) + b_p + shift + w), w ~ N(0, sigma^2)."""
    nodes, weights = _GH
    z = scipy.special.logit(BASE) + difficulty[:, None] + shift + sigma * nodes[None, :]
    return float((scipy.special.expit(z) @ weights).mean() / weights.sum())


def logit_shift(effect: float, difficulty: np.ndarray, sigma: float) -> float:
    if effect == 0:
        return 0.0
    base = expected_pass1(0.0, difficulty, sigma)
    return float(scipy.optimize.brentq(lambda d: expected_pass1(d, difficulty, sigma) - base - effect, -3, 3,
                                       xtol=1e-10))


def _study_block(s: Setting) -> dict:
    looks = list(s.looks) or [min(s.seeds_a, s.seeds_b)]
    return {"name": "planted", "claims": [{
        "id": "b_beats_a", "claim": "B beats A on pass@1", "metric": "pass@1", "condition": "arm=b",
        "baseline": "arm=a", "type": "superiority", "direction": "higher", "paper": 0.03}],
        "plan": {"looks": looks, "spending": s.spending}}


def _batches(s: Setting, n: int) -> list[int]:
    """The batch (look) each of an arm's n seeds arrives in."""
    if not s.looks:
        return [0] * n
    return [next(i for i, k in enumerate(s.looks) if j < k) for j in range(n)]


def plant(s: Setting, rng: np.random.Generator, difficulty: np.ndarray) -> Sweep:
    """One planted sweep, as `load_sweep` would return it."""
    sigma_seed, sigma_int = VARIANCE[s.variance]
    shift = logit_shift(s.effect, difficulty, math.hypot(sigma_seed, sigma_int))
    ids = np.asarray([f"p{i:04d}" for i in range(N_PROMPTS)], dtype=object)
    study = _study_block(s)
    roots = [Path(f"/planted/look{i}") for i in range(max(1, len(s.looks)))]
    runs = []
    for arm, n, delta in (("a", s.seeds_a if not s.looks else s.looks[-1], 0.0),
                          ("b", s.seeds_b if not s.looks else s.looks[-1], shift)):
        for seed, batch in enumerate(_batches(s, n)):
            z = (scipy.special.logit(BASE) + difficulty + delta + rng.normal(0, sigma_seed)
                 + rng.normal(0, sigma_int, N_PROMPTS))
            c = rng.binomial(N_SAMPLES, scipy.special.expit(z)).astype(np.float64)
            n_ = np.full(N_PROMPTS, float(N_SAMPLES))
            table = PromptTable(ids, {"n": n_, "n_correct": c, "n_answered": n_.copy()})
            ev = RegimeEval(REGIME_NO_TOOL, RunDir(roots[batch]).eval_dir(REGIME_NO_TOOL), table, {"n_prompts": N_PROMPTS})
            overrides = (f"arm={arm}", f"seed={seed}")
            status = {"state": "completed", "started_at": f"2026-01-0{batch + 1}T00:00:00"}
            runs.append(Run(roots[batch] / f"{arm}{seed}", f"look{batch}/{arm}{seed}", overrides, (f"arm={arm}",),
                            str(seed), "completed", status, {REGIME_NO_TOOL: ev}, None, outcome="ok",
                            config={"seed": seed, "arm": arm, "study": study}))
    return Sweep(roots=roots, runs=runs)


def write_planted(sweep: Sweep, root: Path) -> list[Path]:
    """Write a planted sweep as run directories (the run-directory contract, through ablate.eval's
    own summarize/write_eval), one sweep directory per look under `root`; returns those directories."""
    # heavy: torch/transformers (ablate.eval), off the calibration's own sweeps, which write no run directories
    from ablate.eval import summarize, write_eval

    dirs = []
    for run in sweep.runs:
        look_dir = Path(root) / run.path.parent.name
        rd = RunDir(look_dir / run.path.name)
        rd.hydra_dir.mkdir(parents=True, exist_ok=True)
        write_text(rd.hydra_file(rd.OVERRIDES), yaml.safe_dump(list(run.overrides)))
        write_text(rd.hydra_file(rd.CONFIG), yaml.safe_dump(run.config))
        write_json(rd.status_file, run.status)
        for regime, ev in run.evals.items():
            cols = ev.prompts.cols
            rows = [{"id": str(pid), "n_numbers": 4, "n": int(n), "n_correct": int(c), "n_answered": int(a),
                     "mean_length": 40.0, "verdicts": {"correct": int(c), "wrong_value": int(n - c)}}
                    for pid, n, c, a in zip(ev.prompts.ids, cols["n"], cols["n_correct"], cols["n_answered"])]
            write_eval(rd, regime, summarize(rows, [1]), rows)
        if look_dir not in dirs:
            dirs.append(look_dir)
    return dirs


def decide(sweep: Sweep) -> dict:
    row = claims_of(sweep).table.iloc[0]
    return {"verdict": row["verdict"], "low": row["ci_low"], "high": row["ci_high"], "n": row["n"],
            "n_baseline": row["n_baseline"], "diff": row["estimate"]}


def naive_looks(sweep: Sweep, s: Setting) -> dict:
    """What looking again without a plan does: each look's pooled seeds decided as a fixed design at
    the full alpha; the sweep counts as a rejection if any look's interval excludes 0."""
    rejects, last = False, {}
    for k, n in enumerate(s.looks):
        block = {**_study_block(Setting(n, n)), "plan": {"looks": [n], "spending": "pocock"}}
        root = Path(f"/planted/naive{k}")  # one directory: the engine sees one look, at the full alpha
        runs = [replace(r, config={**r.config, "study": block}, path=root / r.path.name) for r in sweep.runs
                if int(r.path.parent.name.removeprefix("look")) <= k]
        last = decide(Sweep(roots=[root], runs=runs))
        rejects |= bool(last["low"] > 0 or last["high"] < 0)
    return {**last, "low": 1.0 if rejects else -1.0, "high": 2.0 if rejects else 1.0,
            "verdict": "replicated" if rejects else "inconclusive"}


def old_procedure(sweep: Sweep, rng: np.random.Generator, resamples: int, confidence: float = 0.95) -> dict:
    """What ablate.stats decided by before the engine: the hierarchical-bootstrap difference interval
    (seeds, then prompts, independently per arm) and the paired prompt permutation test (seeds averaged,
    conditions swapped within prompts: paired.paired_test's p-value, without its BCa interval)."""
    arms = {arm: [r.evals[REGIME_NO_TOOL].prompts.cols["n_correct"] / N_SAMPLES for r in sweep.runs
                  if r.condition == (f"arm={arm}",)] for arm in "ab"}
    hier = {arm: hierarchical_bootstrap_distribution(v, n_resamples=resamples, rng=rng)[:, 0] for arm, v in arms.items()}
    low, high = percentile_interval(hier["b"] - hier["a"], confidence)
    delta = np.mean(arms["b"], axis=0) - np.mean(arms["a"], axis=0)
    signs = rng.integers(0, 2, size=(resamples, delta.size)) * 2.0 - 1.0
    p = _permutation_p((signs @ delta) / delta.size, float(delta.mean()), exact=False)
    return {"old_hier": bool(low > 0 or high < 0), "old_paired": bool(p <= 1 - confidence)}


def run_setting(s: Setting, sweeps: int, seed: int = 0, old: int = 0, resamples: int = 1000,
                progress: bool = True) -> dict:
    difficulty = _difficulty()
    sigma_seed, sigma_int = VARIANCE[s.variance]
    rng = np.random.default_rng([seed, s.seeds_a, s.seeds_b, int(s.effect * 1e4), len(s.looks),
                                 list(VARIANCE).index(s.variance)])
    rows, sds = [], []
    for i in tqdm(range(sweeps), desc=s.name, disable=not progress, leave=False):
        sweep = plant(s, rng, difficulty)
        out = naive_looks(sweep, s) if s.spending == "none" else decide(sweep)
        a = np.asarray([r.evals[REGIME_NO_TOOL].prompts.cols["n_correct"].mean() / N_SAMPLES
                        for r in sweep.runs if r.condition == ("arm=a",)])
        sds.append(a.var(ddof=1))
        if i < old:
            out.update(old_procedure(sweep, rng, resamples))
        rows.append(out)
    df = pd.DataFrame(rows)
    excl = (df["low"] > 0) | (df["high"] < 0)
    covered = (df["low"] <= s.effect) & (s.effect <= df["high"])
    res = {"setting": s.name, "seeds": f"plan {'/'.join(map(str, s.looks))} {s.spending}" if s.looks else
           (f"{s.seeds_a}" if s.seeds_a == s.seeds_b else f"{s.seeds_a} vs {s.seeds_b}"),
           "variance": s.variance, "effect": s.effect, "sweeps": sweeps, "seed_sd": float(np.sqrt(np.mean(sds))),
           "rejects_0": float(excl.mean()), "replicated": float((df["verdict"] == "replicated").mean()),
           "coverage": float(covered.mean()), "mean_seeds": float(df[["n", "n_baseline"]].mean(axis=1).mean())}
    if s.looks and s.effect > 0:  # the fixed design of equal power, for the seeds the plan saves
        res["fixed_seeds_equal_power"] = fixed_seeds_for(res["replicated"], res["seed_sd"], s.effect, 0.05)
    if old:
        res.update(old_sweeps=old, old_hier=float(df["old_hier"].head(old).mean()),
                   old_paired=float(df["old_paired"].head(old).mean()))
    return res


def fixed_seeds_for(power: float, sd: float, effect: float, alpha: float = 0.05) -> float:
    """Seeds per arm a fixed Welch design needs for `power` at `effect` (normal seed values of SD sd)."""
    return seeds_needed(sd, effect, alpha, power=min(max(power, 0.05), 0.99))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=1000, help="planted sweeps per setting (default 1000)")
    p.add_argument("--effects", default="0,0.01,0.02,0.03", help="planted effects on pass@1 (comma list)")
    p.add_argument("--variance", default="small,large", help="seed variance settings: small, large")
    p.add_argument("--seeds", default="3,5,10,20,5v11", help="fixed designs: seeds per arm, AvB for unequal")
    p.add_argument("--plan", default="5,10,20", help="a sequential plan's looks (seeds per arm); 'none' to skip")
    p.add_argument("--spending", default="pocock", choices=["pocock", "obrien_fleming", "none"],
                   help="the plan's Lan-DeMets spending function (default pocock, as the study presets); none: "
                        "every look at the full alpha, what adding seeds without a plan does (coverage not meaningful)")
    p.add_argument("--render", nargs="+", type=Path, metavar="CSV",
                   help="instead of running: render saved --out tables as markdown (into --doc between markers); "
                        "where several measured a setting, the one with the most sweeps counts")
    p.add_argument("--doc", type=Path, help="with --render: the markdown file whose <!-- calibration --> block to replace")
    p.add_argument("--old", type=int, default=0, metavar="N", help="also run the replaced procedure on the first N sweeps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the table as CSV here")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.render:
        return render(args.render, args.doc)
    if args.sweeps < 1:
        p.error("--sweeps must be at least 1")
    try:
        effects = [float(e) for e in args.effects.split(",")]
        variances = [v.strip() for v in args.variance.split(",")]
        designs = [tuple(int(x) for x in d.split("v")) if "v" in d else (int(d), int(d)) for d in args.seeds.split(",") if d]
        plan = () if args.plan == "none" else tuple(int(x) for x in args.plan.split(","))
    except ValueError as exc:
        p.error(f"bad list: {exc}")
    unknown = [v for v in variances if v not in VARIANCE]
    if unknown:
        p.error(f"--variance {','.join(unknown)}: choose from {', '.join(VARIANCE)}")
    settings = [Setting(a, b, v, e) for v in variances for e in effects for a, b in designs]
    settings += [Setting(plan[-1], plan[-1], v, e, plan, args.spending) for v in variances for e in effects] if plan else []
    rows = []
    for s in settings:
        rows.append(run_setting(s, args.sweeps, args.seed, args.old, progress=not args.no_progress))
        print(_line(rows[-1]), flush=True)
    table = pd.DataFrame(rows)
    if args.out:
        write_text(args.out, table.to_csv(index=False, float_format="%.4f"))
    return 0


def _cells(g: pd.DataFrame, col: str, effects, digits: int = 3) -> str:
    return " / ".join(f"{g.loc[e, col]:.{digits}f}" if e in g.index and col in g and pd.notna(g.loc[e, col]) else "–"
                      for e in effects)


def markdown(table: pd.DataFrame) -> str:
    """docs/stats.md's two tables: fixed designs (false positives and coverage at no effect, power
    at each planted effect, the replaced procedure beside it) and seed plans (the error over the
    whole plan, the seeds it spends, the fixed design of equal power)."""
    effects = (0.01, 0.02, 0.03)
    fixed = ["| seeds per arm | seed variance | seed SD | false positives, Δ=0 (sweeps) | coverage, Δ=0; lowest over Δ "
             "| power, Δ=0.01 / 0.02 / 0.03 | old hierarchical interval: FP; power 0.01 / 0.02 "
             "| old paired prompt test: FP; power 0.01 / 0.02 |", "|---|---|---|---|---|---|---|---|"]
    plans = ["| plan (seeds per arm), spending | seed variance | false positives over the plan, Δ=0 (sweeps) "
             "| coverage, Δ=0; lowest over Δ | power, Δ=0.01 / 0.02 / 0.03 | mean seeds per arm, Δ=0 / 0.01 / 0.02 / 0.03 "
             "| fixed design of equal power, Δ=0.01 / 0.02 / 0.03 |", "|---|---|---|---|---|---|---|"]
    for (seeds, variance), g in table.groupby(["seeds", "variance"], sort=False):
        g = g.set_index("effect")
        if 0.0 not in g.index:
            continue
        null = g.loc[0.0]
        fp = f"{null['rejects_0']:.3f} ({int(null['sweeps'])})"
        cov = f"{null['coverage']:.3f}; {g['coverage'].min():.3f}"
        if str(seeds).startswith("plan"):
            naive = str(seeds).endswith(" none")
            plans.append(f"| {seeds.removeprefix('plan ')} | {variance} | {fp} | {'–' if naive else cov} "
                         f"| {_cells(g, 'replicated', effects)} | {_cells(g, 'mean_seeds', (0.0, *effects), 1)} "
                         f"| {_cells(g, 'fixed_seeds_equal_power', effects, 0)} |")
            continue
        old = [f"{null[c]:.3f}; {_cells(g, c, effects[:2])}" if c in g and pd.notna(null.get(c)) else "–"
               for c in ("old_hier", "old_paired")]
        fixed.append(f"| {seeds} | {variance} | {g['seed_sd'].mean():.4f} | {fp} | {cov} "
                     f"| {_cells(g, 'replicated', effects)} | {old[0]} | {old[1]} |")
    return "\n".join(fixed) + "\n\n" + "\n".join(plans) + "\n"


def combine(paths) -> pd.DataFrame:
    """The saved runs as one table: where several measured the same setting, the one with the most
    sweeps gives its numbers (a column it lacks, e.g. the replaced procedure's, comes from the next)."""
    table = pd.concat([pd.read_csv(p, dtype={"seeds": str}) for p in sorted(paths)], ignore_index=True)
    order = table.drop_duplicates(["seeds", "variance"])[["seeds", "variance"]].apply(tuple, axis=1).tolist()
    table = table.sort_values("sweeps", ascending=False, kind="stable")
    table = table.groupby(["seeds", "variance", "effect"], sort=False).first().reset_index()
    table["_order"] = table[["seeds", "variance"]].apply(tuple, axis=1).map({k: i for i, k in enumerate(order)})
    return table.sort_values(["_order", "effect"], kind="stable").drop(columns="_order").reset_index(drop=True)


def render(paths: list[Path], doc: Path | None) -> int:
    return render_block(markdown(combine(paths)), doc, "calibration")


def render_block(text: str, doc: Path | None, marker: str) -> int:
    """Print `text`, or write it between `<!-- marker -->` and `<!-- /marker -->` in `doc` (atomically): the
    rendered tables of docs/stats.md. Exit status 2, one line, when `doc` has no such block."""
    if doc is None:
        print(text)
        return 0
    body = doc.read_text(encoding="utf-8")
    block = re.compile(rf"(<!-- {re.escape(marker)} -->\n).*?(<!-- /{re.escape(marker)} -->)", re.S)
    if not block.search(body):
        print(f"error: {doc} has no <!-- {marker} --> ... <!-- /{marker} --> block", file=sys.stderr)
        return 2
    write_text(doc, block.sub(lambda m: m.group(1) + text + m.group(2), body))
    return 0


def _line(r: dict) -> str:
    fixed = f"  fixed design of equal power: {r['fixed_seeds_equal_power']:g}/arm" if "fixed_seeds_equal_power" in r else ""
    old = f"  old: hier {r['old_hier']:.3f} paired {r['old_paired']:.3f} ({r['old_sweeps']})" if "old_hier" in r else ""
    return (f"{r['setting']:<32} sd {r['seed_sd']:.4f}  excludes 0 {r['rejects_0']:.3f}  replicated "
            f"{r['replicated']:.3f}  coverage {r['coverage']:.3f}  seeds/arm {r['mean_seeds']:.1f}{fixed}{old}")


if __name__ == "__main__":
    sys.exit(main())
