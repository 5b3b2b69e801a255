"""Mechanism checks of paper 004 that the stats report does not compute: per run and regime, from
eval/<regime>/summary.json.

    python docs/findings/oracle_tool_study/mechanisms.py multirun/oracle_tool_study > mechanisms.csv

- verdict shares: each verdict (correct, wrong_value, substitution_error, wrong_numbers, bad_format,
  no_answer) as a share of all samples, and substitution_error as a share of the failures (the
  paper: "common", about a third of the failures)
- pass@1, best_of_n (pass@16: the verifier picks among 16 samples) and their gap (what best-of-N adds)
- tool calls per rollout and solver errors (tool regime of the oracle runs)
Then, per condition and regime, the mean and sd over seeds.

With a second argument (a csv path), the comparisons the report cannot make because they cross regimes
or are within-run: oracle SFT evaluated with the solver against plain SFT without it (the paper's
headline), and best-of-N's gain (pass@16 - pass@1) per condition and regime; each as a mean over seeds
with a 95% two-level bootstrap interval (seeds, then prompts within a seed; `ablate.stats.intervals`).
"""

import json
import sys
from pathlib import Path

import numpy as np
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


def per_prompt(run: Path, regime: str) -> pd.DataFrame:
    """One row per test prompt: pass@1 (n_correct / n) and solved by best-of-n (any correct)."""
    samples = pd.read_json(run / "eval" / regime / "samples.jsonl", lines=True)
    return pd.DataFrame({"id": samples["id"], "pass1": samples["n_correct"] / samples["n"],
                         "best": (samples["n_correct"] > 0).astype(float)}).set_index("id").sort_index()


def bootstrap(values: list[np.ndarray], seed: int) -> np.ndarray:
    from ablate.stats.intervals import hierarchical_bootstrap_distribution

    return hierarchical_bootstrap_distribution(values, rng=np.random.default_rng(seed))[:, 0]


if len(sys.argv) > 2:
    runs = {(r["condition"], r["regime"]): [] for r in rows}
    for r in rows:
        runs[(r["condition"], r["regime"])].append(Path(sys.argv[1]) / r["run"])
    out = []

    def record(name, a, b, dist_a, dist_b, n_a, n_b):
        diff = dist_a - dist_b if dist_b is not None else dist_a
        low, high = np.percentile(diff, [2.5, 97.5])
        out.append({"comparison": name, "value": a - (b or 0.0), "ci_low": low, "ci_high": high,
                    "a": a, "b": b, "seeds_a": n_a, "seeds_b": n_b})

    plain, oracle = runs.get(("sft-plain", "no_tool"), []), runs.get(("sft-oracle", "tool"), [])
    if plain and oracle:
        a = [per_prompt(r, "tool")["pass1"].to_numpy() for r in oracle]
        b = [per_prompt(r, "no_tool")["pass1"].to_numpy() for r in plain]
        record("pass@1: oracle SFT with the solver - plain SFT", float(np.mean([x.mean() for x in a])),
               float(np.mean([x.mean() for x in b])), bootstrap(a, 1), bootstrap(b, 2), len(a), len(b))
    for (condition, regime), members in sorted(runs.items()):
        gains = [(lambda t: (t["best"] - t["pass1"]).to_numpy())(per_prompt(r, regime)) for r in members]
        record(f"best-of-16 gain (pass@16 - pass@1): {condition}, {regime}", float(np.mean([g.mean() for g in gains])),
               None, bootstrap(gains, 3), None, len(gains), None)
    frame = pd.DataFrame(out).astype({"seeds_a": "Int64", "seeds_b": "Int64"})
    frame.to_csv(sys.argv[2], index=False, float_format="%.4f")
