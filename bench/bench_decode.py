"""The decoding loop of `rollout=hf` (`HFEngine._sample_chunk`) against a frozen copy of the loop before it
was made cheaper (tests/hf_baseline.py), A/B interleaved (A B B A ...), figures printed, not asserted.

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_decode.py               # 8 rounds, 1 thread
    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_decode.py --rounds 12 --profile

Batches, with the shipped SFT model (`builtin:tiny-sft`) and the same seed for both loops (so the same
completions, which tests/test_rollout.py checks bit for bit; here it is only re-checked once):
- `rloo`: one RLOO step's generation: 16 Countdown train-split prompts x k=8, 64 new tokens, temperature 1.
- `eval`: one evaluation call: 32 test-split prompts x n=16 (eval.batch_size=512), 96 new tokens, the paper's
  evaluation sampling (T=0.6, top-k 20, top-p 0.95).
On a shared machine wall times move with the load, so only the ratio of interleaved medians is evidence;
the load average is printed before and after. The ratio of median process CPU seconds is printed too (with
one torch thread it leaves out time spent waiting for a core, though not a contended memory bus).
`--profile`: a cProfile of the new loop on the rloo batch (4 calls).

    PYTHONPATH=src python bench/bench_decode.py --vocab 151936 --sequences 256,1024

`--vocab V`: the sampling cost of one decode step at a large vocabulary (the 0.5B model's 151,936), random
logits for each `--sequences` count: the old sampler (log_softmax, softmax of the filtered logits,
torch.multinomial on the host) against `ablate.rollout.hf.sample_on_device`, at RL sampling (T=1) and the
papers' evaluation sampling (T=0.6, top-k 20, top-p 0.95); medians of `--rounds`. Beside them, the forward of
one decode step of the 0.5B shape (random weights, a 64-token KV cache) at the smallest sequence count,
scaled by rows for the others, to give sampling's share of a step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, fmt, machine, markdown_table  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))


def batches():
    """The default task's splits (`conf/task/countdown.yaml`): train prompts as RLOO samples them, test
    prompts as the final evaluation does."""
    from omegaconf import OmegaConf

    from ablate.config import CONF_DIR
    from ablate.models import encode_prompt, prompt_text
    from ablate.rollout import SamplingParams
    from ablate.tasks.countdown import CountdownTask
    from ablate.tasks.countdown.data import build_splits

    splits = build_splits(OmegaConf.load(CONF_DIR / "task" / "countdown.yaml"))

    def prompts(problems):
        return [encode_prompt(prompt_text(CountdownTask({}, None), p, "compact", TOKENIZER), TOKENIZER) for p in problems]

    return {"rloo": (prompts(splits.train[:16]), 8, SamplingParams(max_new_tokens=64)),
            "eval": (prompts(splits.test[:32]), 16,
                     SamplingParams(temperature=0.6, top_k=20, top_p=0.95, max_new_tokens=96))}


TOKENIZER = None


def old_sampler(scaled, top_k, top_p, generator):
    """The sampler before issue 40 (hf.py at fff0a5b): three full passes and the matrix copied to the host."""
    from ablate.rollout.hf import filter_logits

    logp = torch.log_softmax(scaled, dim=-1)
    probs = torch.softmax(filter_logits(scaled, top_k, top_p), dim=-1)
    token = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)


def decode_forward_s(rows: int) -> float:
    """Seconds of one decode step's forward of the 0.5B shape for `rows` sequences (a 64-token KV cache)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.cache_utils import DynamicCache

    from ablate.config import load_group_config

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**load_group_config("model", "qwen2.5-0.5b-shape")["arch"])).eval()
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.randint(0, 100, (rows, 64)), past_key_values=cache, use_cache=True, logits_to_keep=1)
        start = time.perf_counter()
        model(input_ids=torch.randint(0, 100, (rows, 1)), past_key_values=cache, use_cache=True)
    return time.perf_counter() - start


def vocab_bench(vocab: int, sequences: list[int], rounds: int, threads: int) -> None:
    from ablate.rollout.hf import sample_on_device

    print(f"machine: {machine()}\nload average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    forward = decode_forward_s(min(sequences)) / min(sequences)  # seconds per row
    rows = []
    for n in sequences:
        scaled = torch.randn(n, vocab, generator=torch.Generator().manual_seed(0)) * 3
        for label, (top_k, top_p, temperature) in {"RL (T=1)": (0, 1.0, 1.0),
                                                   "eval (T=0.6, k 20, p 0.95)": (20, 0.95, 0.6)}.items():
            x = scaled / temperature
            medians = {}
            for name, sampler in (("old", old_sampler), ("new", sample_on_device)):
                times = []
                for r in range(rounds + 1):
                    y = x.clone()  # sample_on_device overwrites its input
                    start = time.perf_counter()
                    sampler(y, top_k, top_p, torch.Generator().manual_seed(r))
                    times.append(time.perf_counter() - start)
                medians[name] = statistics.median(times[1:])
            step = forward * n
            rows.append([n, label, fmt(medians["old"] * 1000, 0), fmt(medians["new"] * 1000, 1),
                         fmt(medians["old"] / medians["new"], 1), fmt(step, 2),
                         f"{100 * medians['old'] / (step + medians['old']):.1f}%",
                         f"{100 * medians['new'] / (step + medians['new']):.1f}%"])
    print(markdown_table(["sequences", "sampling", "old ms", "new ms", "old/new", "forward s (0.5B shape)",
                          "old share of step", "new share of step"], rows))
    print(f"\nvocabulary {vocab:,}; medians of {rounds} rounds after a warm-up; {threads} torch thread(s); forward "
          f"measured once at {min(sequences)} sequences and scaled by rows; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    from hf_baseline import BaselineHFEngine
    from ablate.models import load_model, load_tokenizer
    from ablate.rollout.hf import HFEngine

    global TOKENIZER
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8, help="A B B A pairs per batch (after one warm-up pair)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", default="rloo,eval")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--vocab", type=int, default=0, help="time the sampling of one decode step at this vocabulary")
    p.add_argument("--sequences", default="256,1024", help="with --vocab: sequence counts, comma-separated")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.vocab:
        return vocab_bench(args.vocab, [int(n) for n in args.sequences.split(",")], args.rounds, args.threads)
    TOKENIZER = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = load_model({"kind": "tiny", "name_or_path": "builtin:tiny-sft"}, TOKENIZER).eval()
    engines = {"old": BaselineHFEngine(model, TOKENIZER, batch_size=512), "new": HFEngine(model, TOKENIZER, batch_size=512)}
    print(f"machine: {machine()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    rows, settings = [], batches()
    for name in args.batches.split(","):
        prompts, k, params = settings[name]
        times: dict[str, list[float]] = {"old": [], "new": []}
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        outs = {}

        def timed(which: str, seed: int) -> None:
            start, start_cpu = time.perf_counter(), time.process_time()
            outs[which] = engines[which].generate(prompts, k, params, torch.Generator().manual_seed(seed))
            times[which].append(time.perf_counter() - start)
            cpu[which].append(time.process_time() - start_cpu)

        timed("old", 0), timed("new", 0)  # warm-up, and the one exactness re-check
        same = (outs["old"].completion_ids == outs["new"].completion_ids
                and outs["old"].behaviour_logprobs == outs["new"].behaviour_logprobs)
        tokens = sum(map(len, outs["new"].completion_ids))
        times, cpu = {"old": [], "new": []}, {"old": [], "new": []}
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")  # A B, B A, ...
            for which in order:
                timed(which, 0)  # same seed: the same tokens every time, so seconds compare directly
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        ratios = sorted(o / n for o, n in zip(times["old"], times["new"]))
        cpu_ratio = statistics.median(cpu["old"]) / statistics.median(cpu["new"])
        rows.append([f"{name}: {len(prompts)}x{k}, {params.max_new_tokens} new", tokens, fmt(old, 3), fmt(new, 3),
                     fmt(tokens / old, 0), fmt(tokens / new, 0), fmt(old / new, 3),
                     f"{fmt(ratios[0], 2)}-{fmt(ratios[-1], 2)}", fmt(cpu_ratio, 3), "yes" if same else "NO"])
    print(markdown_table(["batch", "tokens", "old s", "new s", "old tok/s", "new tok/s", "old/new (medians)",
                          "per-round range", "old/new CPU s", "identical"], rows))
    print(f"\n{args.rounds} interleaved rounds per batch, {args.threads} torch thread(s); "
          f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile:
        import cProfile
        import pstats

        prompts, k, params = settings["rloo"]
        profiler = cProfile.Profile()
        profiler.enable()
        for seed in range(4):
            engines["new"].generate(prompts, k, params, torch.Generator().manual_seed(seed))
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
