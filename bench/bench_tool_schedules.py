"""Tool use over training for each availability schedule (paper 003's figure 2, as tables).

    python bench/bench_tool_schedules.py                          # the sweep in multirun/tools
    python bench/bench_tool_schedules.py --dir multirun/<sweep> --every 5
    python bench/bench_tool_schedules.py --run stage.init=model model.name_or_path=<sft-calc dir>

Reads each run's `metrics.csv` (`tool/p_available`, `tool/available_frac`,
`tool/calls_per_rollout`, `tool/calc_emission_rate`, `train/reward_mean`) and `eval/<regime>/
summary.json`, groups runs by their `tool` condition, and prints: calls per rollout over training
per schedule (mean over each window of `--every` steps, and over seeds), the scheduled p_tool next
to the fraction of rollouts that actually had the tool, and the two evaluation regimes. `--run`
first runs the sweep `stage=rloo tool=off,on,anneal_linear` (extra overrides as arguments) into the
directory. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import yaml

COLUMNS = ("tool/p_available", "tool/available_frac", "tool/calls_per_rollout", "tool/calc_emission_rate",
           "train/reward_mean")


def load_runs(sweep: Path) -> dict[str, list[Path]]:
    """RL run directories of the sweep with a metrics.csv, by tool condition (`tool.name`)."""
    runs: dict[str, list[Path]] = defaultdict(list)
    for config in sorted(sweep.glob("*/.hydra/config.yaml")):
        run, cfg = config.parent.parent, yaml.safe_load(config.read_text())
        metrics = run / "metrics.csv"
        # RL runs that log tool use (not SFT runs, not runs from before tool schedules existed)
        if metrics.is_file() and "tool/p_available" in metrics.open().readline().split(","):
            runs[cfg["tool"]["name"]].append(run)
    return dict(runs)


def curves(runs: list[Path], every: int) -> pd.DataFrame:
    """Per window of `every` steps: the mean of COLUMNS over the window and over runs."""
    frames = []
    for run in runs:
        metrics = pd.read_csv(run / "metrics.csv")
        metrics = metrics.dropna(subset=["tool/p_available"]).drop_duplicates("step", keep="last")
        metrics["window"] = (metrics["step"] // every) * every
        frames.append(metrics.groupby("window")[list(COLUMNS)].mean())
    return pd.concat(frames).groupby(level=0).mean()


def evals(runs: list[Path]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for regime in ("no_tool", "tool"):
        summaries = [json.loads(p.read_text()) for p in (r / "eval" / regime / "summary.json" for r in runs) if p.is_file()]
        if summaries:
            out[regime] = {key: sum(get(s) for s in summaries) / len(summaries) for key, get in (
                ("pass@1", lambda s: s.get("pass@1", s["exact_pass@1"])),
                ("pass@8", lambda s: s.get("pass@8", float("nan"))),
                ("calls/rollout", lambda s: s["tool"]["calls_per_rollout"]),
                ("<calc> emission", lambda s: s["tool"]["calc_emission_rate"]),
                ("tool errors", lambda s: s["tool"]["tool_errors"]))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", dest="sweep", default="multirun/tools", type=Path, help="the sweep directory")
    parser.add_argument("--every", type=int, default=10, help="steps per window of the training table")
    parser.add_argument("--run", action="store_true", help="run the sweep first, with the overrides given")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for --run")
    args = parser.parse_args()
    if args.run:
        command = [sys.executable, "-m", "ablate.train", "-m", "stage=rloo", "tool=off,on,anneal_linear",
                   f"hydra.sweep.dir={args.sweep}", *args.overrides]
        print("running:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    runs = load_runs(args.sweep)
    if not runs:
        raise SystemExit(f"no runs with metrics.csv under {args.sweep}; run the sweep first (--run)")
    order = [n for n in ("off", "on", "anneal_linear", "anneal_step", "anneal_log", "oracle") if n in runs]
    order += sorted(set(runs) - set(order))
    tables = {name: curves(runs[name], args.every) for name in order}

    print(f"sweep {args.sweep}: " + ", ".join(f"{name} ({len(runs[name])} run{'s' * (len(runs[name]) > 1)})"
                                               for name in order))
    print(f"\ncalls per rollout over training (mean over steps [s, s+{args.every}) and runs)")
    calls = pd.DataFrame({name: t["tool/calls_per_rollout"] for name, t in tables.items()})
    print(calls.to_string(float_format=lambda v: f"{v:.2f}", index_names=False))

    print("\nscheduled p_tool / fraction of rollouts with the tool / <calc> emission / reward, per schedule")
    for name, table in tables.items():
        shown = table.rename(columns={"tool/p_available": "p_tool", "tool/available_frac": "available",
                                      "tool/calls_per_rollout": "calls", "tool/calc_emission_rate": "emits <calc>",
                                      "train/reward_mean": "reward"})
        print(f"\n[{name}]")
        print(shown.to_string(float_format=lambda v: f"{v:.3f}", index_names=False))

    print("\nevaluation (mean over runs)")
    rows = []
    for name in order:
        for regime, values in evals(runs[name]).items():
            rows.append({"tool": name, "regime": regime, **values})
    if rows:
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
