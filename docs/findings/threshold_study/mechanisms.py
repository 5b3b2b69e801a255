"""Mechanism checks of paper 001 that the stats report does not compute: per run, from metrics.csv.

    python docs/findings/threshold_study/mechanisms.py multirun/threshold_study [more sweep dirs] > mechanisms.csv

The controller (curriculum=threshold) moves the level (0 easy, 1 medium, 2 hard: thirds of the
solver's search effort) down when the success rate over the last `window` groups is below `low`
and up above `high`. The paper: "worked mechanically" but pass@1 0.12 vs uniform 0.18.
- level_mean_q1..q4: mean level in each quarter of training
- changes_frac_q4: share of the last quarter's steps at which the level changed (> 0.5: flipping)
- time_at_level0/1/2: share of all steps spent at each level
- window_mean_q4: mean success rate in the controller's window over the last quarter
- frac_n3_all: share of 3-number prompts among all draws
- final_val_pass@1: val/pass@1 after the last step
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

rows = []
runs = [(sweep, run) for sweep in map(Path, sys.argv[1:])
        for run in sorted(sweep.glob("*/metrics.csv"), key=lambda p: int(p.parent.name))]
for sweep, run in runs:
    cfg = yaml.safe_load((run.parent / ".hydra" / "config.yaml").read_text())
    m = pd.read_csv(run)
    train = m.dropna(subset=["train/reward_mean"]).sort_values("step")
    row = {"run": run.parent.name if len(sys.argv) == 2 else f"{sweep.name}/{run.parent.name}", "curriculum": cfg["curriculum"]["name"], "seed": cfg["seed"],
           "frac_n3_all": train["curriculum/frac_n3"].mean(),
           "final_val_pass@1": m["val/pass@1"].dropna().iloc[-1]}
    if "curriculum/level" in train:
        level = train["curriculum/level"].to_numpy()
        quarters = np.array_split(np.arange(len(level)), 4)
        for q, idx in enumerate(quarters, 1):
            row[f"level_mean_q{q}"] = level[idx].mean()
        last = quarters[-1]
        row["changes_frac_q4"] = float(np.mean(np.diff(level[last[0] - 1:last[-1] + 1]) != 0))
        for lv in range(3):
            row[f"time_at_level{lv}"] = float(np.mean(level == lv))
        row["window_mean_q4"] = train["curriculum/window_mean"].to_numpy()[last].mean()
    rows.append(row)
table = pd.DataFrame(rows)
table.to_csv(sys.stdout, index=False, float_format="%.4f")
print(table.drop(columns=["run", "seed"]).groupby("curriculum").agg(["mean", "std"]).round(3).T.to_string(),
      file=sys.stderr)
