"""Effective-prompt fraction per step of each curriculum (RLOO on the tiny default), over seeds.

The effective-prompt fraction is the share of a batch's prompts whose k rewards are not all equal:
the only prompts with a non-zero RLOO gradient. Paper 000's frontier sampler and paper 002's DOTS
exist to raise it; this prints it per curriculum, averaged over seeds, for the whole run and for its
first / middle / last third, with the reward and seconds per step.

    python bench/bench_curricula.py                                  # 7 curricula x 3 seeds x 30 steps
    python bench/bench_curricula.py --curricula none,frontier --steps 50 --seeds 0,1
    python bench/bench_curricula.py --runs multirun/headline         # summarise finished runs instead
    python bench/bench_curricula.py --curricula none dynamic_sampling.enabled=true   # dynamic sampling (+dynamic)

Runs go to --out (default: a temporary directory); evaluation is off (this measures training).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

PHASES = ["time/reference_s", "time/generate_s", "time/score_s", "time/learn_s", "time/sync_s"]
ALL = "none,static,static_thirds,threshold,frontier,frontier_replay,dots"


def run_one(curriculum: str, seed: int, steps: int, out: Path, extra: list[str]) -> Path:
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.run import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"curriculum={curriculum}", f"seed={seed}",
                                                       f"stage.max_steps={steps}", "eval.enabled=false", *extra])
    run_dir = out / f"{curriculum}-seed{seed}"
    run(cfg, run_dir)
    return run_dir


def curriculum_of(run_dir: Path) -> str:
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml") if (run_dir / ".hydra").is_dir() else None
    if cfg is not None:
        name = OmegaConf.select(cfg, "curriculum.name") or "none"
        return (name + ("+replay" if OmegaConf.select(cfg, "replay.enabled") else "")
                + ("+dynamic" if OmegaConf.select(cfg, "dynamic_sampling.enabled") else ""))
    return run_dir.name.rsplit("-seed", 1)[0]


def summarise(run_dirs: list[Path]) -> pd.DataFrame:
    rows = []
    for run_dir in run_dirs:
        m = pd.read_csv(run_dir / "metrics.csv")
        m = m.dropna(subset=["train/effective_prompt_frac"])
        thirds = [part["train/effective_prompt_frac"].mean() for part in
                  (m.iloc[: len(m) // 3], m.iloc[len(m) // 3: 2 * len(m) // 3], m.iloc[2 * len(m) // 3:])]
        rows.append({"curriculum": curriculum_of(run_dir), "run": str(run_dir), "steps": len(m),
                     "effective": m["train/effective_prompt_frac"].mean(), "first": thirds[0], "middle": thirds[1],
                     "last": thirds[2], "reward": m["train/reward_mean"].mean(),
                     "s_per_step": m[[c for c in PHASES if c in m.columns]].sum(axis=1).median(),
                     # dynamic sampling: informative share of the generated groups, generation batches per step
                     "kept": m["dynamic/kept_frac"].mean() if "dynamic/kept_frac" in m else math.nan,
                     "gen_batches": m["dynamic/gen_batches"].mean() if "dynamic/gen_batches" in m else math.nan})
    return pd.DataFrame(rows)


def mean_sd(values: pd.Series) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return f"{values.mean():.3f} ± {sd:.3f}" if not math.isnan(sd) else f"{values.mean():.3f}"


def table(frame: pd.DataFrame) -> str:
    lines = ["| curriculum | seeds | steps | effective-prompt frac (mean ± sd over seeds) | first third | middle | "
             "last third | train reward | s/step | kept frac (dynamic) | gen batches/step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, group in frame.groupby("curriculum", sort=False):
        lines.append(f"| {name} | {len(group)} | {int(group['steps'].median())} | {mean_sd(group['effective'])} | "
                     f"{group['first'].mean():.3f} | {group['middle'].mean():.3f} | {group['last'].mean():.3f} | "
                     f"{mean_sd(group['reward'])} | {group['s_per_step'].median():.2f} | "
                     + (f"{mean_sd(group['kept'])} | {group['gen_batches'].mean():.2f} |" if group["kept"].notna().all()
                        else "– | – |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curricula", default=ALL)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temp dir)")
    parser.add_argument("--runs", type=Path, nargs="*", help="summarise these run dirs / sweep dirs instead")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every run, e.g. replay.enabled=true")
    args = parser.parse_args(argv)
    if args.runs:
        run_dirs = sorted({p.parent for root in args.runs for p in root.glob("**/metrics.csv")})
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="bench-curricula-"))
        run_dirs = [run_one(c, int(s), args.steps, out, args.overrides)
                    for c in args.curricula.split(",") for s in args.seeds.split(",")]
    if not run_dirs:
        sys.exit("no runs with metrics.csv found")
    print(table(summarise(run_dirs)))


if __name__ == "__main__":
    main()
