"""How far each run of this realisation follows the first realisation's run of the same condition and seed.

    python docs/findings/tool_annealing_mixed_study_rerun/same_as_first.py

Both start from an SFT that evaluates identically (docs/testbed.md: sft_mixed, sft_mixed_rerun); RLOO's
kernels round differently on AVX2 and AVX512 (tests/goldens/recorded/avx2), so a seed's trajectory is
the first realisation's until a sample tips, then its own. Per mechanism column (a window of steps), the
runs whose value equals the first realisation's to the 4 decimals mechanisms.csv keeps, among the seeds
both realisations ran (0-4).
"""

from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
first = pd.read_csv(HERE.parent / "tool_annealing_mixed_study" / "mechanisms.csv")
second = pd.read_csv(HERE / "mechanisms.csv")
pairs = first.merge(second, on=["tool", "seed"], suffixes=("_first", ""))
windows = {"calc_rate_first": "steps 0-9", "val_pass@1_60": "after 60 updates", "reward_with_tool": "steps 57-66",
           "reward_after": "steps 90-99", "val_pass@1_100": "after 100 updates"}
print("| column | window | runs equal to the first realisation's |\n|---|---|---|")
for column, window in windows.items():
    same = pairs[f"{column}_first"].round(4) == pairs[column].round(4)
    by_arm = ", ".join(f"{tool} {int(s.sum())}/{len(s)}" for tool, s in same.groupby(pairs["tool"], sort=False))
    print(f"| `{column}` | {window} | {int(same.sum())} of {len(same)} ({by_arm}) |")
