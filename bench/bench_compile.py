"""`trainer.compile=true` (torch.compile of the training loss's forward) against eager, whole runs, interleaved
(A B, B A, ...); figures printed, not asserted.

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_compile.py                  # rloo and oracle SFT
    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_compile.py --only rloo --steps 40 --rounds 3

Workloads (no evaluation, no checkpoints in the timed window, 1 torch thread unless --threads):
- `rloo`: the default RL step (`stage=rloo` from the shipped SFT model: 16 prompts x 8, 64 new tokens); only
  the learner's policy forward (and so its backward) is compiled, decoding is not.
- `sft_oracle`: paper 004's oracle-trajectory SFT (`stage=sft stage.trace=oracle tool=oracle`, sequences up to
  480 tokens, batches of 64), the study's most expensive stage.
For each: the first step's seconds (the compile happens there), the median step after `--warmup` steps,
eager / compiled of the medians, and the break-even: the steps after which the compile has paid for itself.
Final training losses are printed side by side (compiled kernels round differently, so they are close,
not equal).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, markdown_table, median, run_ablate, step_seconds  # noqa: E402

WORKLOADS = {
    "rloo": ["stage=rloo"],
    "sft_oracle": ["stage=sft", "stage.trace=oracle", "tool=oracle", "stage.max_length=480",
                   "model.arch.max_position_embeddings=512", "stage.warmup_steps=2"],
}
COMMON = ["eval.enabled=false", "stage.checkpoint_every=1000000", "resume=never"]


def one_run(workload: str, compiled: bool, steps: int, threads: int, seed: int) -> list[dict[str, float]]:
    overrides = WORKLOADS[workload] + [f"stage.max_steps={steps}", f"trainer.num_threads={threads}",
                                       f"trainer.compile={str(compiled).lower()}", f"seed={seed}"]
    with tempfile.TemporaryDirectory() as tmp:
        return run_ablate(overrides, Path(tmp) / "run", base=COMMON)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="one workload (default: both)")
    parser.add_argument("--steps", type=int, default=30, help="steps per run (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the median (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="eager/compiled pairs per workload (default 2)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("ABLATE_CACHE", tempfile.mkdtemp(prefix="ablate-bench-cache-"))
    print(machine())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    rows = []
    for workload in [args.only] if args.only else list(WORKLOADS):
        results: dict[bool, list[dict]] = {False: [], True: []}
        for round_ in range(args.rounds):
            for compiled in ((False, True) if round_ % 2 == 0 else (True, False)):
                started = time.monotonic()
                metrics = one_run(workload, compiled, args.steps, args.threads, seed=round_)
                seconds = step_seconds(metrics)
                results[compiled].append({"first": seconds[0], "median": median(seconds[args.warmup:]),
                                          "wall": time.monotonic() - started,
                                          "loss": metrics[-1].get("train/loss", float("nan"))})
                print(f"  {workload} round {round_} {'compiled' if compiled else 'eager   '}: first step "
                      f"{seconds[0]:.1f} s, median step {results[compiled][-1]['median']:.3f} s, "
                      f"final train/loss {results[compiled][-1]['loss']:.5f}", flush=True)
        eager, compiled = ({k: median(r[k] for r in results[c]) for k in ("first", "median")} for c in (False, True))
        # The first compiled run compiles; later ones (any process on this machine) mostly load inductor's
        # cache, so the worst first step is the compile a new machine pays.
        first_compiled = max(r["first"] for r in results[True])
        saved = eager["median"] - compiled["median"]
        break_even = (first_compiled - eager["first"]) / saved if saved > 0 else float("inf")
        rows.append([workload, f"{eager['first']:.1f}",
                     " / ".join(f"{r['first']:.1f}" for r in results[True]), f"{eager['median']:.3f}",
                     f"{compiled['median']:.3f}", f"{eager['median'] / compiled['median']:.2f}x",
                     "never" if break_even == float("inf") else f"{break_even:.0f}"])
    print()
    print(markdown_table(["workload", "first step s, eager", "first step s, compiled (each run, in order)",
                          "median step s, eager", "median step s, compiled", "eager / compiled",
                          "break-even steps (worst first step)"], rows))
    print(f"\n{args.rounds} rounds x {args.steps} steps per run (median after {args.warmup}), torch threads "
          f"{args.threads}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
