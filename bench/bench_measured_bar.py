"""Error rates of a one-sample claim against a bar one evaluation measured: the bar typed as an exact
constant (`against: 0.31625`) against the bar read with its sampling error (`against_eval`). Figures
printed, not asserted.

    PYTHONPATH=src python bench/bench_measured_bar.py [--sims 4000] [--alpha 0.025]

Planted where 001's `rloo_improves_on_sft` decides: seeds ~ Normal(truth, 0.0084) (the SD of 001's
curriculum=none arm over 14 seeds, docs/findings/threshold_study/claims.csv), the bar ~ Normal(0.31625,
0.0052) (the shipped SFT's evaluation: 500 prompts x 16 answers, its bound), a superiority claim with
effect of interest 0.03 at the gatekeeping level 0.025 under `test: randomization` (the sign guard).
Each sweep draws one bar and n seeds and decides with the engine's look rule (`engine.look_verdict`):
    false 'replicated'      truth = the bar's truth (no gain): the rate a verdict says RL helped;
    false 'not replicated'  truth = bar + 0.03 (the effect of interest): the rate futility fires;
    power                   truth = bar + 0.03: the rate 'replicated' (what the honest bar costs).
Each error rate's nominal is alpha / 2 (one side of the interval).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ablate.stats.claims.declared import Claim  # noqa: E402
from ablate.stats.claims.engine import look_verdict  # noqa: E402
from ablate.stats.maths.verdicts import clopper_pearson  # noqa: E402

SEED_SD, BAR, BAR_SE, EFFECT = 0.0084, 0.31625, 0.0052, 0.03


def rate(n: int, truth_shift: float, measured: bool, sims: int, alpha: float, want: str, rng) -> tuple[int, int]:
    base = Claim(id="rl", text="RLOO improves on its SFT start", metric="pass@1", condition="none", baseline=None,
                 effect=EFFECT)
    hits = 0
    for _ in range(sims):
        bar = rng.normal(BAR, BAR_SE)
        xs = rng.normal(BAR + truth_shift, SEED_SD, n)
        claim = replace(base, null=bar, null_se=BAR_SE if measured else 0.0)
        _, verdict, _, _ = look_verdict(claim, xs, None, alpha, "randomization")
        hits += verdict == want
    return hits, sims


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=4000, help="sweeps per cell (default 4000)")
    ap.add_argument("--alpha", type=float, default=0.025, help="the claim's level (default 0.025: 001's gatekeeping)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"nominal per side: {args.alpha / 2:.4f}; {args.sims} sweeps a cell")
    print("| seeds | bar | false 'replicated' (no gain) | false 'not replicated' (gain = 0.03) | 'replicated' at gain 0.03 (power) |")
    print("|---|---|---|---|---|")
    for n in (5, 8, 16):
        for measured in (False, True):
            rng = np.random.default_rng([args.seed, n, measured])
            clock = time.perf_counter()
            cells = []
            for shift, want in ((0.0, "replicated"), (EFFECT, "not replicated"), (EFFECT, "replicated")):
                k, total = rate(n, shift, measured, args.sims, args.alpha, want, rng)
                lo, hi = clopper_pearson(k, total, 0.95)
                times = f" = {k / total / (args.alpha / 2):.1f}x" if len(cells) < 2 else ""
                cells.append(f"{k / total:.4f} [{lo:.4f}, {hi:.4f}]{times}")
            name = "measured (against_eval)" if measured else "typed constant"
            print(f"| {n} | {name} | {' | '.join(cells)} |  ({time.perf_counter() - clock:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
