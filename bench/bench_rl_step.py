"""Seconds per RLOO step, split by phase, for each rollout engine on the tiny default.

    python bench/bench_rl_step.py                          # rollout=hf and rollout=vllm, 10 steps after 2
    python bench/bench_rl_step.py --rollouts hf --steps 20
    python bench/bench_rl_step.py -- stage.k=4             # extra overrides for every run

Runs the real loop (`python -m ablate.train stage=rloo rollout=<engine> eval.enabled=false`, the shipped
SFT model, `stage` defaults: 16 prompts x 8 samples, 64 new tokens) in a fresh process per engine, reads
its `metrics.csv` and prints the median of each `time/*` column over the steps after the warm-up ones.
An engine that is not installed (vLLM) is reported as skipped. Also prints vLLM's start-up (import,
building the LLM) and the first step, which the median leaves out. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("generate_s", "score_s", "learn_s", "sync_s")

STARTUP = """
import json, os, time
clock = time.monotonic()
from ablate.models import load_model, load_tokenizer
from ablate.rollout.vllm import VLLMEngine, _import_vllm
cfg = {"kind": "tiny", "name_or_path": "builtin:tiny-sft"}
tokenizer = load_tokenizer(cfg); policy = load_model(cfg, tokenizer)
clock = time.monotonic(); _import_vllm(); imported = time.monotonic() - clock
clock = time.monotonic()
engine = VLLMEngine(policy, tokenizer, llm_kwargs={"kv_cache_memory_bytes": 256 * 2**20})
built = time.monotonic() - clock
syncs = []
for _ in range(5):
    clock = time.monotonic(); engine.sync(policy); syncs.append(time.monotonic() - clock)
print("RESULT " + json.dumps({"import_s": imported, "build_s": built, "sync_s": sorted(syncs)[2]}))
"""


def run_engine(rollout: str, steps: int, overrides: list[str], workdir: Path) -> list[dict[str, float]]:
    run_dir = workdir / rollout
    command = [sys.executable, "-m", "ablate.train", "stage=rloo", f"rollout={rollout}", f"stage.max_steps={steps}",
               "eval.enabled=false", "resume=never", f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rollout={rollout} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    with open(run_dir / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("time/generate_s")]
    return [{key.removeprefix("time/"): float(value) for key, value in row.items() if key.startswith("time/") and value}
            for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", default="hf,vllm")
    parser.add_argument("--steps", type=int, default=10, help="measured steps (after the warm-up ones)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (after --)")
    args = parser.parse_args()

    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; "
          f"{args.steps} steps after {args.warmup} warm-up, medians")
    table = []
    with tempfile.TemporaryDirectory(prefix="bench-rl-step-") as workdir:
        for rollout in args.rollouts.split(","):
            if rollout == "vllm" and importlib.util.find_spec("vllm") is None:
                print("rollout=vllm: skipped, vLLM is not installed (docs/rollout.md, rollout=vllm)")
                continue
            clock = time.monotonic()
            rows = run_engine(rollout, args.warmup + args.steps, args.overrides, Path(workdir))
            wall = time.monotonic() - clock
            measured = rows[args.warmup:]
            medians = {key: statistics.median(r[key] for r in measured) for key in (*PHASES, "generate_tokens_per_s")}
            table.append((rollout, medians, rows[0]["generate_s"], wall))
    if not table:
        return
    header = (f"{'rollout':8} {'generate s':>10} {'score s':>8} {'learn s':>8} {'sync s':>8} {'step s':>8} "
              f"{'gen tok/s':>10} {'1st gen s':>10} {'process s':>10}")
    print(header)
    print("-" * len(header))
    for rollout, m, first, wall in table:
        step = sum(m[p] for p in PHASES)
        print(f"{rollout:8} {m['generate_s']:10.3f} {m['score_s']:8.4f} {m['learn_s']:8.3f} {m['sync_s']:8.4f} "
              f"{step:8.3f} {m['generate_tokens_per_s']:10.0f} {first:10.2f} {wall:10.1f}")
    if any(rollout == "vllm" for rollout, *_ in table):
        done = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True,
                              env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line:
            s = json.loads(line.removeprefix("RESULT "))
            print(f"vLLM start-up: import {s['import_s']:.1f} s, LLM build {s['build_s']:.1f} s; "
                  f"sync alone {s['sync_s'] * 1000:.0f} ms (median of 5)")


if __name__ == "__main__":
    main()
