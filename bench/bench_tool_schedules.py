"""Tool use over training for each availability schedule (paper 003's figure 2, as tables), read from the
`ablate.stats` report of the sweep.

    python bench/bench_tool_schedules.py                          # the sweep in multirun/tools
    python bench/bench_tool_schedules.py --dir multirun/<sweep> multirun/<other sweep> --every 5
    python bench/bench_tool_schedules.py --report stats/tools      # an existing report (curves.csv.gz, summary.csv)
    python bench/bench_tool_schedules.py --run stage.init=model model.name_or_path=<sft-calc dir>

Writes the sweep's report with `ablate.stats` (into --report, default a temporary directory; sweeps given
together are pooled) and reads its tables: `curves.csv.gz` (per condition and step, the mean over seeds of
`tool/p_available`, `tool/available_frac`, `tool/calls_per_rollout`, `tool/calc_emission_rate`,
`train/reward_mean`) and `summary.csv` (per condition and eval regime, the mean over seeds). Prints calls
per rollout over training per schedule (mean over each window of `--every` steps of the seed means), the
scheduled p_tool next to the fraction of rollouts that actually had the tool, and the two evaluation
regimes. Conditions without `tool/p_available` (SFT runs, runs from before tool schedules) are left out.
`--run` first runs the sweep `stage=rloo tool=off,on,anneal_linear` (extra overrides as arguments) into
the directory. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

COLUMNS = ("tool/p_available", "tool/available_frac", "tool/calls_per_rollout", "tool/calc_emission_rate",
           "train/reward_mean")
EVAL = {"pass@1": "pass@1", "pass@8": "pass@8", "calls/rollout": "tool/calls_per_rollout",
        "<calc> emission": "tool/calc_emission_rate", "tool errors": "tool/tool_errors"}
ORDER = ("off", "on", "anneal_linear", "anneal_step", "anneal_log", "oracle")


def make_report(sweeps: list[Path], out: Path) -> Path:
    """The ablate.stats report of the sweeps (tables only)."""
    from ablate.stats import Settings, analyze, load_sweep, write_report

    write_report(analyze(load_sweep(sweeps), Settings(resamples=1000)), out, plots=False)
    return out


def schedule(condition: str) -> str:
    """`tool=anneal_linear,...` -> anneal_linear: the report labels a condition by its distinguishing overrides."""
    found = re.search(r"(?:^|,)tool=([^,]+)", condition)
    return found.group(1) if found else condition


def curves(report: Path, every: int) -> dict[str, tuple[pd.DataFrame, int]]:
    """Per schedule, per window of `every` steps: the mean over the window of COLUMNS' seed means; and the seeds."""
    frame = pd.read_csv(report / "curves.csv.gz")
    frame = frame[frame["metric"].isin(COLUMNS)]
    tables = {}
    for condition, rows in frame.groupby("condition", sort=False):
        wide = rows.pivot_table(index="step", columns="metric", values="mean")
        if "tool/p_available" not in wide:
            continue
        wide = wide.dropna(subset=["tool/p_available"])
        wide["window"] = (wide.index // every) * every
        tables[schedule(condition)] = (wide.groupby("window")[[c for c in COLUMNS if c in wide]].mean(),
                                       int(rows["n_seeds"].max()))
    return tables


def evals(report: Path, names: list[str]) -> pd.DataFrame:
    summary = pd.read_csv(report / "summary.csv")
    summary = summary[summary["level"] == "condition"]
    summary = summary.assign(tool=summary["condition"].map(schedule))
    rows = []
    for name in names:
        for regime, group in summary[summary["tool"] == name].groupby("regime", sort=True):
            values = group.set_index("metric")["value"]
            if "pass@1" not in values:
                values["pass@1"] = values.get("exact_pass@1", float("nan"))
            rows.append({"tool": name, "regime": regime, **{k: values.get(m, float("nan")) for k, m in EVAL.items()}})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", dest="sweeps", nargs="+", default=[Path("multirun/tools")], type=Path,
                        help="sweep directories (runs are grouped by tool condition across them)")
    parser.add_argument("--report", type=Path, help="the report directory: read it if it has curves.csv.gz, else write it")
    parser.add_argument("--every", type=int, default=10, help="steps per window of the training table")
    parser.add_argument("--run", action="store_true", help="run the sweep first, with the overrides given")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for --run")
    args = parser.parse_args()
    if args.run:
        command = [sys.executable, "-m", "ablate.train", "-m", "stage=rloo", "tool=off,on,anneal_linear",
                   f"hydra.sweep.dir={args.sweeps[0]}", *args.overrides]
        print("running:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    report = args.report or Path(tempfile.mkdtemp(prefix="bench-tools-"))
    if args.run or not (report / "curves.csv.gz").is_file():
        make_report(args.sweeps, report)
    tables = curves(report, args.every)
    if not tables:
        raise SystemExit(f"no RL runs with tool metrics in the report {report}; run the sweep first (--run)")
    order = [n for n in ORDER if n in tables] + sorted(set(tables) - set(ORDER))
    seeds = {name: tables[name][1] for name in order}
    tables = {name: tables[name][0] for name in order}

    print(f"report {report}: " + ", ".join(f"{name} ({n} seed{'s' * (n > 1)})" for name, n in seeds.items()))
    print(f"\ncalls per rollout over training (mean over steps [s, s+{args.every}) of the mean over seeds)")
    calls = pd.DataFrame({name: t["tool/calls_per_rollout"] for name, t in tables.items()})
    print(calls.to_string(float_format=lambda v: f"{v:.2f}", index_names=False))

    print("\nper schedule: scheduled p_tool, fraction of rollouts with the tool, calls per rollout and per rollout "
          "with the tool, fraction writing <calc>, reward")
    for name, table in tables.items():
        table = table.copy()
        # Calls in the rollouts that had the tool: the policy's habit, apart from the schedule.
        table.insert(3, "calls per tool rollout", (table["tool/calls_per_rollout"] / table["tool/available_frac"])
                     .where(table["tool/available_frac"] > 0))
        shown = table.rename(columns={"tool/p_available": "p_tool", "tool/available_frac": "available",
                                      "tool/calls_per_rollout": "calls", "tool/calc_emission_rate": "emits <calc>",
                                      "train/reward_mean": "reward"})
        print(f"\n[{name}]")
        print(shown.to_string(float_format=lambda v: f"{v:.3f}", index_names=False))

    rows = evals(report, order)
    if len(rows):
        print("\nevaluation (mean over seeds)")
        print(rows.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
