"""Mechanism checks of paper 000 that the stats report does not compute: per run, from metrics.csv.

    python docs/findings/curriculum_ladder_study_rerun/mechanisms.py multirun/curriculum_ladder_study multirun/curriculum_ladder_study_look2 > mechanisms.csv

A directory is a sweep or a committed report that carries its runs (runs.jsonl.gz), read by
ablate.stats' own loader; with several, a run is named <directory>/<job>, as the pooled report names it.

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

from ablate.stats.load import load_sweep

rows = []
sweep = load_sweep([Path(a) for a in sys.argv[1:]])
for run in sorted((r for r in sweep.runs if r.metrics is not None),
                  key=lambda r: (sweep.roots.index(r.path.parent), int(r.path.name))):
    cfg = run.config
    m = run.metrics.reset_index()
    late = m[m["step"] >= 50]
    curriculum = (cfg.get("curriculum") or {}).get("name", "none")
    condition = f"{cfg['stage']['name']}:{curriculum}" + (f":order={cfg['stage']['pairs']['order']}"
                                                         if cfg["stage"]["name"] == "ipo" else "")
    rows.append({
        "run": run.rel,
        "condition": condition, "seed": cfg["seed"],
        "explore_2nd_half": late["curriculum/explore_frac"].mean() if "curriculum/explore_frac" in m else None,
        "frac_n2_2nd_half": late["curriculum/frac_n2"].mean() if "curriculum/frac_n2" in m else None,
        "frac_n3_2nd_half": late["curriculum/frac_n3"].mean() if "curriculum/frac_n3" in m else None,
        "peak_no_answer_after_switch": late["val/no_answer_rate"].max(),
        "final_val_pass@1": m["val/pass@1"].dropna().iloc[-1],
    })
pd.DataFrame(rows).to_csv(sys.stdout, index=False, float_format="%.4f")
