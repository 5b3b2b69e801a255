"""Mechanism checks of paper 000 that the stats report does not compute: per run, from metrics.csv.

    python docs/findings/curriculum_ladder_study/mechanisms.py multirun/curriculum_ladder_study [more sweep dirs] > mechanisms.csv

- explore_2nd_half: frontier samplers' share of never-seen prompts among the draws of steps 50-99
  (near 1: the frontier weights never engaged; the paper's V2 ran mostly in that regime early on)
- frac_n2_2nd_half: share of 2-number (easy) prompts drawn in steps 50-99 (uniform: ~0.5; a frontier that
  drops solved easy prompts draws fewer; the testbed's forgetting mechanism)
- frac_n3_2nd_half: share of 3-number prompts drawn in steps 50-99
- peak_no_answer_after_switch: the largest val/no_answer_rate evaluated in steps 50-99 (paper 000:
  22% at step 69 under the static curriculum, 0.9% without; its easy->hard switch is at step 50)
- final_val_pass@1: val/pass@1 after the last step
"""

import sys
from pathlib import Path

import pandas as pd
import yaml

rows = []
runs = [(sweep, run) for sweep in map(Path, sys.argv[1:])
        for run in sorted(sweep.glob("*/metrics.csv"), key=lambda p: int(p.parent.name))]
for sweep, run in runs:
    cfg = yaml.safe_load((run.parent / ".hydra" / "config.yaml").read_text())
    m = pd.read_csv(run)
    late = m[m["step"] >= 50]
    curriculum = (cfg.get("curriculum") or {}).get("name", "none")
    condition = f"{cfg['stage']['name']}:{curriculum}" + (f":order={cfg['stage']['pairs']['order']}"
                                                         if cfg["stage"]["name"] == "ipo" else "")
    rows.append({
        "run": run.parent.name if len(sys.argv) == 2 else f"{sweep.name}/{run.parent.name}",
        "condition": condition, "seed": cfg["seed"],
        "explore_2nd_half": late["curriculum/explore_frac"].mean() if "curriculum/explore_frac" in m else None,
        "frac_n2_2nd_half": late["curriculum/frac_n2"].mean() if "curriculum/frac_n2" in m else None,
        "frac_n3_2nd_half": late["curriculum/frac_n3"].mean() if "curriculum/frac_n3" in m else None,
        "peak_no_answer_after_switch": late["val/no_answer_rate"].max(),
        "final_val_pass@1": m["val/pass@1"].dropna().iloc[-1],
    })
pd.DataFrame(rows).to_csv(sys.stdout, index=False, float_format="%.4f")
