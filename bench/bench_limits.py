"""The RL step against the machine's limit (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_limits.py                       # matmul peak + 8 ablate RL steps
    PYTHONPATH=src python bench/bench_limits.py --from-json step.json # reuse bench_step_profile.py's steps
    PYTHONPATH=src python bench/bench_limits.py --threads 1 --size 1024

1. Peak: the best of repeated n x n float32 matmuls (2 n^3 FLOPs each) with the torch threads given.
2. Learner: achieved FLOP/s = 6 * params * trained tokens / learn time (the usual forward + backward
   estimate over the real, unpadded tokens), as a fraction of the peak. Learn time is `time/learn_s`
   (reference forward, policy forward, backward, AdamW, losses). A second figure counts what the CPU
   actually computes: 8 * params per token (the reference forward's 2 on top) over the padded batch.
3. Generation: achieved tokens/s (tokens kept / generate time) against two bounds the forward pass's
   cost implies: the FLOP bound peak / (2 * params) tokens/s, and the measured throughput of the same
   model's batched full-sequence forward (the reference forward: padded tokens / its time), i.e. what
   decoding would reach without per-token overhead. Decoding slots (every sequence of the batch runs
   until the longest one stops) show how much of the decode work is spent on finished sequences.
Attention FLOPs (a few per cent at these lengths) are left out of every count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt, machine, markdown_table, median  # noqa: E402


def matmul_peak(n: int, seconds: float, threads: int) -> dict[str, float]:
    """Best and median FLOP/s of n x n float32 matmuls repeated for about `seconds`."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)  # warm-up: allocation, thread pool
    rates, spent = [], 0.0
    while spent < seconds or len(rates) < 3:
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        elapsed = time.perf_counter() - start
        spent += elapsed
        rates.append(2 * n**3 / elapsed)
    return {"best": max(rates), "median": median(rates), "reps": len(rates)}


def parameter_count() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.models import resolve_path

    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32)
    return sum(p.numel() for p in model.parameters())


def limits(phases: list[dict], params: int, peak: float) -> dict[str, float]:
    """The learner's and the generation's achieved rates and their fractions of the bounds (medians over steps)."""
    learn = [p["reference_forward"] + p["policy_forward"] + p["backward"] + p["optimizer"] + p["learn_other"]
             for p in phases]
    learner_flops = median(6 * params * p["trained_tokens"] / t for p, t in zip(phases, learn))
    computed_flops = median(8 * params * p["padded_tokens"] / t for p, t in zip(phases, learn))
    gen_rate = median(p["tokens"] / p["generate"] for p in phases)
    slot_rate = median(p["decode_slots"] / p["generate"] for p in phases)
    forward_rate = median(p["padded_tokens"] / p["reference_forward"] for p in phases if p["reference_forward"] > 0)
    flop_bound = peak / (2 * params)
    return {"learner_flops": learner_flops, "learner_frac": learner_flops / peak,
            "computed_flops": computed_flops, "computed_frac": computed_flops / peak,
            "gen_tokens_per_s": gen_rate, "gen_flop_bound": flop_bound, "gen_frac_flop": gen_rate / flop_bound,
            "forward_tokens_per_s": forward_rate, "gen_frac_forward": gen_rate / forward_rate,
            "forward_frac_flop": forward_rate / flop_bound,
            "slot_rate": slot_rate, "slot_use": median(p["tokens"] / p["decode_slots"] for p in phases)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--size", type=int, default=2048, help="matmul size n")
    p.add_argument("--seconds", type=float, default=5.0, help="time spent on matmuls")
    p.add_argument("--steps", type=int, default=8, help="RL steps to run when no --from-json")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--from-json", type=Path, help="per-step phases written by bench_step_profile.py --json")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()

    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        phases, warmup, rl_threads = saved["phases"], saved["warmup"], saved["threads"]
    else:
        from bench_step_profile import profile_steps

        phases, warmup, rl_threads = profile_steps(args.steps, args.threads), args.warmup, args.threads
    phases = phases[warmup:]
    peak = matmul_peak(args.size, args.seconds, args.threads)
    params = parameter_count()
    figures = limits(phases, params, peak["best"])
    print(f"machine: {machine()}")
    print(f"peak: {args.size}x{args.size} float32 matmul, {peak['reps']} reps, threads {args.threads}: best "
          f"{peak['best'] / 1e9:.1f} GFLOP/s (median {peak['median'] / 1e9:.1f}); RL steps: threads {rl_threads}, "
          f"{len(phases)} steps; model {params:,} parameters\n")
    f = figures
    rows = [
        ["machine peak (matmul)", f"{peak['best'] / 1e9:.1f} GFLOP/s", "1"],
        ["learner, 6·P·trained tokens / learn s", f"{f['learner_flops'] / 1e9:.2f} GFLOP/s", f"{f['learner_frac']:.1%} of peak"],
        ["learner, 8·P·padded tokens / learn s (incl. reference)", f"{f['computed_flops'] / 1e9:.2f} GFLOP/s",
         f"{f['computed_frac']:.1%} of peak"],
        ["generation, tokens kept / generate s", f"{fmt(f['gen_tokens_per_s'], 0)} tok/s", ""],
        ["  bound: peak / (2·P)", f"{fmt(f['gen_flop_bound'], 0)} tok/s", f"{f['gen_frac_flop']:.1%} reached"],
        ["  bound: batched full-sequence forward (measured)", f"{fmt(f['forward_tokens_per_s'], 0)} tok/s",
         f"{f['gen_frac_forward']:.1%} reached (the forward itself: {f['forward_frac_flop']:.1%} of the FLOP bound)"],
        ["  decoding slots / generate s", f"{fmt(f['slot_rate'], 0)} slots/s",
         f"{f['slot_use']:.0%} of slots hold a kept token"],
    ]
    print(markdown_table(["figure", "value", "fraction"], rows))
    if args.json:
        args.json.write_text(json.dumps({"peak": peak, "params": params, **figures}, indent=1))


if __name__ == "__main__":
    main()
