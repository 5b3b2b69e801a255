"""Mechanism checks of paper 003 that the stats report does not compute: per run, from metrics.csv.

    python docs/findings/tool_annealing_mixed_study_rerun/mechanisms.py multirun/tool_annealing_mixed_study multirun/tool_annealing_mixed_study_look2 > mechanisms.csv

A directory is a sweep or a committed report that carries its runs (runs.jsonl.gz), read by
ablate.stats' own loader; with several, a run is named <directory>/<job>, as the pooled report names it.

The anneal schedules reach p_tool = 0 at step 67 of 100 (anneal_ratio 0.667); the paper's reward
climbed 0.420 (step 67) -> 0.485 (step 99) after the withdrawal.
- reward_with_tool: train/reward_mean over steps 57-66 (the last ten with any tool access)
- reward_after: train/reward_mean over steps 90-99 (ten steps, the tool long gone)
- calc_rate_first / calc_rate_last: share of training rollouts writing <calc>, steps 0-9 / 90-99
  (with or without the tool answering: the offloading habit)
- p_tool_last_available: the last step at which the schedule's p_tool was > 0
- val_pass@1_60 / val_pass@1_100: no-tool held-out pass@1 (val/, 200 prompts x 4) after 60 and 100
  updates (logged on the rows of steps 59 and 99)
"""

import sys
from pathlib import Path

import pandas as pd

from ablate.stats.load import load_sweep


def mean_over(frame: pd.DataFrame, column: str, first: int, last: int) -> float:
    rows = frame[(frame["step"] >= first) & (frame["step"] <= last)]
    return rows[column].mean()


def val_after(frame: pd.DataFrame, updates: int) -> float:
    if "val/pass@1" not in frame:  # a run still before its first evaluation
        return float("nan")
    rows = frame[frame["step"] == updates - 1]["val/pass@1"].dropna()
    return rows.iloc[-1] if len(rows) else float("nan")


rows = []
sweep = load_sweep([Path(a) for a in sys.argv[1:]])
for run in sorted((r for r in sweep.runs if r.metrics is not None),
                  key=lambda r: (sweep.roots.index(r.path.parent), int(r.path.name))):
    cfg = run.config
    m = run.metrics.reset_index()
    train = m.dropna(subset=["train/reward_mean"])
    available = train[train["tool/p_available"] > 0]["step"]
    rows.append({
        "run": run.rel, "tool": cfg["tool"]["name"], "seed": cfg["seed"],
        "p_tool_last_available": int(available.max()) if len(available) else None,
        "reward_with_tool": mean_over(train, "train/reward_mean", 57, 66),
        "reward_after": mean_over(train, "train/reward_mean", 90, 99),
        "calc_rate_first": mean_over(train, "tool/calc_emission_rate", 0, 9),
        "calc_rate_last": mean_over(train, "tool/calc_emission_rate", 90, 99),
        "val_pass@1_60": val_after(m, 60),
        "val_pass@1_100": val_after(m, 100),
    })
table = pd.DataFrame(rows)
table.to_csv(sys.stdout, index=False, float_format="%.4f")
print(table.drop(columns=["run", "seed"]).groupby("tool").agg(["mean", "std"]).round(3).T.to_string(), file=sys.stderr)
