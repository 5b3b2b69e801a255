"""Mechanism checks of paper 004 that the stats report does not compute: per run and regime, from
eval/<regime>/summary.json.

    python docs/findings/oracle_tool_study/mechanisms.py multirun/oracle_tool_study > mechanisms.csv

- verdict shares: each verdict (correct, wrong_value, substitution_error, wrong_numbers, bad_format,
  no_answer) as a share of all samples, and substitution_error as a share of the failures (the
  paper: "common", about a third of the failures)
- pass@1, best_of_n (pass@16: the verifier picks among 16 samples) and their gap (what best-of-N adds)
- tool calls per rollout and solver errors (tool regime of the oracle runs)
Then, per condition and regime, the mean and sd over seeds.
"""

import json
import sys
from pathlib import Path

import pandas as pd
import yaml

VERDICTS = ("correct", "wrong_value", "substitution_error", "wrong_numbers", "bad_format", "no_answer")
rows = []
for summary_path in sorted(Path(sys.argv[1]).glob("*/eval/*/summary.json")):
    run = summary_path.parents[2]
    cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    summary = json.loads(summary_path.read_text())
    stage = cfg["stage"]
    condition = stage["name"] + (f"-{stage['trace']}" if stage.get("trace") and stage["name"] == "sft" else "")
    counts = summary["verdicts"]
    total = sum(counts.values()) or 1
    failures = total - counts.get("correct", 0) or 1
    tool = summary.get("tool") or {}
    rows.append({"run": run.name, "condition": condition, "regime": summary["regime"], "seed": cfg["seed"],
                 "pass@1": summary["pass@1"], "best_of_n": summary["best_of_n"],
                 "best_of_n_gain": summary["best_of_n"] - summary["pass@1"],
                 **{f"share_{v}": counts.get(v, 0) / total for v in VERDICTS},
                 "substitution_of_failures": counts.get("substitution_error", 0) / failures,
                 "tool_calls_per_rollout": tool.get("calls_per_rollout"), "tool_errors": tool.get("tool_errors")})
table = pd.DataFrame(rows).sort_values(["condition", "regime", "seed"])
table.to_csv(sys.stdout, index=False, float_format="%.4f")
summary = table.drop(columns=["run", "seed"]).groupby(["condition", "regime"]).agg(["mean", "std"])
print(summary.round(3).T.to_string(), file=sys.stderr)
