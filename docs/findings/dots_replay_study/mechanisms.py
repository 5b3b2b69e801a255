"""Mechanism checks of paper 002 that the stats report does not compute: per run, from metrics.csv.

    python docs/findings/dots_replay_study/mechanisms.py multirun/dots_replay_study > mechanisms.csv
    python docs/findings/dots_replay_study/mechanisms.py docs/findings/dots_replay_study multirun/dots_replay_study_look3
    python docs/findings/dots_replay_study/mechanisms.py --threshold-from=2 docs/findings/dots_replay_study \
        multirun/dots_replay_study_look3    # the reach bar as looks 1-2 set it (see reach_step)

A directory is a sweep or a committed report that carries its runs (runs.jsonl.gz: every run's
metrics.csv, read by ablate.stats' own loader). With several sweep directories (a study's looks) a
run is named <directory>/<job>, as the pooled report names it, and the reach threshold is the
baseline's mean over all of them.

- effective_prompt_frac: mean over steps of train/effective_prompt_frac, the share of the batch's
  prompt groups with mixed rewards (some samples right, some wrong): the only groups with a gradient
  under RLOO. The paper: +25.4% with DOTS + replay.
- kept_frac (dynamic sampling): the informative share of everything it generated (dynamic/kept_frac)
- replayed_frac: share of each batch taken from the replay buffer
- dots_reference_pearson / dots_batch_pearson: correlation of DOTS' predicted difficulty with the
  observed one on its reference rollouts and on the training batch (does the predictor predict?)
- reference_share / extra_generate_share: DOTS' reference rollouts and dynamic sampling's extra
  rollouts as a share of the run's wall time (both are charged in time/elapsed_s)
- elapsed_s: wall time of the 100 steps (2 jobs x 1 thread on 2 cores); step_s: seconds per step
  without the held-out evaluations (time/val_s), the paper's "per-step time"
- reach_step / reach_s: first step (and elapsed seconds) at which val/pass@1 reaches the baseline's
  final val/pass@1 (mean over its seeds), as the report's reach.csv; a run that never reaches it is
  counted at 100 steps and its whole time (a lower bound, in the method's favour). With
  --threshold-from=K the bar is the baseline's mean over the first K looks only (a committed report
  carrying several looks counts as several, one per sweep directory it was made from): a later look's
  runs are then measured against the bar the earlier looks were decided with, which stay as made
Then, per condition, the paired (same seed) differences with the baseline, mean [95% t-interval]."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ablate.stats.load import load_sweep

rows = []
args = sys.argv[1:]
first = int(args.pop(0).split("=", 1)[1]) if args and args[0].startswith("--threshold-from=") else None
sweep = load_sweep([Path(a) for a in args])
for run in sorted((r for r in sweep.runs if r.metrics is not None),
                  key=lambda r: (sweep.roots.index(r.path.parent), int(r.path.name))):
    cfg = run.config
    m = run.metrics.reset_index()
    train = m.dropna(subset=["train/reward_mean"]).sort_values("step")
    dynamic = cfg.get("dynamic_sampling", {}).get("enabled", False)
    condition = (cfg["curriculum"]["name"] + ("+replay" if cfg["replay"]["enabled"] else "")
                 + ("+dynamic" if dynamic else ""))
    elapsed = float(train["time/elapsed_s"].max())
    mean = lambda col: float(train[col].mean()) if col in train else float("nan")  # noqa: E731
    total = lambda col: float(train[col].sum()) if col in train else 0.0  # noqa: E731
    rows.append({"run": run.rel, "condition": condition, "seed": cfg["seed"],
                 "effective_prompt_frac": mean("train/effective_prompt_frac"),
                 "kept_frac": mean("dynamic/kept_frac"), "replayed_frac": mean("replay/replayed_frac"),
                 "dots_reference_pearson": mean("curriculum/dots_reference_pearson"),
                 "dots_batch_pearson": mean("curriculum/dots_batch_pearson"),
                 "reference_share": total("time/reference_s") / elapsed,
                 "extra_generate_share": total("dynamic/extra_generate_s") / elapsed,
                 "elapsed_s": elapsed, "step_s": (elapsed - total("time/val_s")) / len(train),
                 "final_val_pass@1": float(m["val/pass@1"].dropna().iloc[-1]), "_val": m.dropna(subset=["val/pass@1"]),
                 "_look": sweep.roots.index(run.path.parent)})
table = pd.DataFrame(rows)
looks = table.pop("_look")  # a report carrying several looks holds one sweep directory per look
threshold = table.loc[(table.condition == "none") & (looks < (first or len(sweep.roots))), "final_val_pass@1"].mean()
for i, val in table.pop("_val").items():
    hit = val[val["val/pass@1"] >= threshold]
    table.loc[i, "reached"] = not hit.empty
    table.loc[i, "reach_step"] = float(hit["step"].iloc[0]) if not hit.empty else 100.0
    table.loc[i, "reach_s"] = float(hit["time/elapsed_s"].iloc[0]) if not hit.empty else table.loc[i, "elapsed_s"]
table.to_csv(sys.stdout, index=False, float_format="%.4f")
summary = table.drop(columns=["run", "seed"]).groupby("condition").agg(["mean", "std"])
print(summary.round(3).T.to_string(), file=sys.stderr)
print(f"threshold: baseline's final val/pass@1 {threshold:.4f}", file=sys.stderr)


def interval(values: np.ndarray) -> str:
    mean, sem = values.mean(), stats.sem(values)
    half = stats.t.ppf(0.975, len(values) - 1) * sem
    return f"{mean:+.3g} [{mean - half:+.3g}, {mean + half:+.3g}] (per seed {', '.join(f'{v:+.3g}' for v in values)})"


base = table[table.condition == "none"].set_index("seed")
for condition, group in table[table.condition != "none"].groupby("condition"):
    g = group.set_index("seed")
    g = g.loc[base.index.intersection(g.index)]  # the seeds both arms ran (an arm not continued has fewer)
    base_g = base.loc[g.index]
    print(f"\n{condition} vs none, paired by seed (n={len(g)}, reached {int(g.reached.sum())}/{len(g)}):", file=sys.stderr)
    print(f"  effective prompts, relative %: {interval(100 * (g.effective_prompt_frac / base_g.effective_prompt_frac - 1).to_numpy())}",
          file=sys.stderr)
    print(f"  steps to reach: {interval((g.reach_step - base_g.reach_step).to_numpy())}", file=sys.stderr)
    print(f"  seconds to reach: {interval((g.reach_s - base_g.reach_s).to_numpy())}", file=sys.stderr)
    print(f"  seconds per step, relative %: {interval(100 * (g.step_s / base_g.step_s - 1).to_numpy())}", file=sys.stderr)
