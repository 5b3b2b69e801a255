"""Where the time of one ablate RL step goes, rollout=hf (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_step_profile.py                      # 8 steps of the default
    PYTHONPATH=src python bench/bench_step_profile.py --steps 12 --threads 1 --json step.json
    PYTHONPATH=src python bench/bench_step_profile.py stage.k=16           # any ablate.train override

Runs `ablate.train` in this process (the shipped SFT model, `stage=rloo` defaults: B=16 prompts x k=8,
64 new tokens) and reads the phases each `RLOOModule.training_step` logs (`time/<phase>_s`): generate
(the engine's sampling loop), score (the verifier), reference forward (frozen model, no grad), policy
forward, backward, optimizer (AdamW step), the rest of the learner (padding, losses, gradient clipping),
weight sync to the engine, and what is left of the step's wall time (Lightning's loop, logging); token
counts come from a Lightning callback. Medians over the steps after `--warmup`, with each phase's
share. rollout=vllm's phases come from bench_rl_step.py on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (ABLATE_PHASES, ablate_phase_callback, fmt, machine, markdown_table, median,  # noqa: E402
                     run_ablate, shares)


def profile_steps(steps: int, threads: int, overrides=()) -> list[dict[str, float]]:
    """Per-step phases (seconds) and token counts of a fresh ablate RL run."""
    timers = ablate_phase_callback()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_ablate([f"stage.max_steps={steps}", f"trainer.num_threads={threads}", *overrides],
                          Path(tmp) / "run", callbacks=[timers])
    return timers.phases(rows)


def phase_table(phases, warmup: int) -> tuple[str, dict]:
    kept = phases[warmup:]
    table = shares(kept, ABLATE_PHASES)
    step = median(p["step"] for p in kept)
    rows = [[name, fmt(seconds, 3), f"{share:.1%}"] for name, (seconds, share) in table.items()]
    rows.append(["**step (wall, median)**", fmt(step, 3), ""])
    rows.append(["step (CPU seconds of this process, median)", fmt(median(p["cpu"] for p in kept), 3), ""])
    return markdown_table(["phase", "median s", "share"], rows), {"phases": table, "step": step}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json", type=Path, help="write the per-step phases here (bench_limits.py --from-json reads it)")
    p.add_argument("overrides", nargs="*", help="ablate.train overrides, e.g. stage.k=16")
    args = p.parse_args()
    phases = profile_steps(args.steps, args.threads, args.overrides)
    table, summary = phase_table(phases, args.warmup)
    kept = phases[args.warmup:]
    sync_share = summary["phases"]["sync"][1]
    print(f"machine: {machine()}")
    print(f"rollout=hf, {args.steps} steps ({args.warmup} warm-up left out), threads {args.threads}, "
          f"overrides {args.overrides or 'none'}\n")
    print(table)
    print(f"\nweight sync share: {sync_share:.2%} (the hf engine samples with the learner's own weights, so "
          "sync only re-points it)")
    print(f"per step: {median(p['sequences'] for p in kept):.0f} sequences, "
          f"{median(p['tokens'] for p in kept):.0f} generated tokens, "
          f"{median(p['trained_tokens'] for p in kept):.0f} trained tokens "
          f"({median(p['padded_tokens'] for p in kept):.0f} with padding)")
    if args.json:
        args.json.write_text(json.dumps({"phases": phases, "warmup": args.warmup, "threads": args.threads,
                                         "overrides": args.overrides}, indent=1))


if __name__ == "__main__":
    main()
