"""Which of DAPO's parts engage on the tiny model (CPU): a short run of `recipe=dapo` as shipped (16 updates per
batch) and the same at one update per batch, read back from metrics.csv.

    python bench/bench_recipe_engagement.py                      # 30 steps each, 1 torch thread
    python bench/bench_recipe_engagement.py --steps 60 --every 20 -- stage.lr=5e-5

For each arm, per window of `--every` steps and over the whole run (means over steps): the clip fractions
(`train/is_clip_frac_low`, `_high`: tokens whose ratio lies past 1 - 0.2 with A < 0, past 1 + 0.28 with A > 0),
the mean and largest importance ratio, the share of fresh completions cut at the budget (`train/truncated_frac`),
the mean soft overlong penalty of the batch learnt from (`train/overlong_penalty_mean`), dynamic sampling's refill
rounds (`dynamic/gen_batches` - 1) and topped-up share, the mean response length of the batch learnt from (tokens;
the overlong buffer is the last `stage.overlong_buffer` of `sampling.max_new_tokens`), the training reward, and
s/step. A part engages where its figure is away from 0. Starts from the shipped SFT (`model=tiny`), no evaluation,
no checkpoints in the window. Prints figures and the load average before and after; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from _common import ROOT, machine, read_metrics, run_ablate, step_seconds

ARMS = {"dapo (16 updates/batch)": [], "dapo, 1 update/batch": ["stage.ppo_mini_batches=1"]}
COLUMNS = {  # printed name -> (metrics.csv column, transform)
    "clip low": ("train/is_clip_frac_low", None),
    "clip high": ("train/is_clip_frac_high", None),
    "ratio mean": ("train/is_weight_mean", None),
    "ratio max": ("train/is_weight_max", None),
    "truncated": ("train/truncated_frac", None),
    "overlong pen.": ("train/overlong_penalty_mean", None),
    "refills": ("dynamic/gen_batches", lambda v: v - 1),
    "topped up": ("dynamic/topped_up_frac", None),
    "length": ("train/response_length", None),
    "reward": ("train/reward_mean", None),
}


def window_means(rows: list[dict[str, float]], start: int, stop: int) -> dict[str, float]:
    """The mean over steps [start, stop) of each column (NaN where no step logged it)."""
    out = {}
    for name, (column, transform) in COLUMNS.items():
        values = [r[column] for r in rows[start:stop] if column in r]
        mean = sum(values) / len(values) if values else float("nan")
        out[name] = transform(mean) if transform else mean
    return out


def table(rows: list[dict[str, float]], every: int) -> str:
    seconds = step_seconds(rows)
    lines = ["| steps | " + " | ".join(COLUMNS) + " | s/step |", "|---" * (len(COLUMNS) + 2) + "|"]
    windows = [(start, min(start + every, len(rows))) for start in range(0, len(rows), every)]
    for label, start, stop in [(f"{a}-{b - 1}", a, b) for a, b in windows] + [("all", 0, len(rows))]:
        means = window_means(rows, start, stop)
        cells = [f"{v:.4f}" if v == 0 or abs(v) >= 1e-3 else f"{v:.1e}" for v in means.values()]  # a small share shows
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {sum(seconds[start:stop]) / (stop - start):.2f} |")
    return "\n".join(lines)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="extra ablate overrides for both arms")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"machine: {machine()}; commit {commit}; torch threads {args.threads}; {os.cpu_count()} cores seen")
    base = ["recipe=dapo", f"stage.max_steps={args.steps}", f"trainer.num_threads={args.threads}"] + args.overrides
    for name, extra in ARMS.items():
        before = load()
        with tempfile.TemporaryDirectory() as tmp:
            rows = run_ablate(base + extra, Path(tmp) / "run")
        print(f"\n{name}: {' '.join(base[1:] + extra)}; load average before {before}, after {load()}")
        print(table(rows, args.every))


if __name__ == "__main__":
    main()
