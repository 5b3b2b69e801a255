"""What cheaper layouts of the RL step's work would save (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_step_options.py              # 5 interleaved repeats
    PYTHONPATH=src python bench/bench_step_options.py --repeats 9 --threads 1

Generation: ablate's engine (`HFEngine.generate`: every sequence of the batch is decoded until the
longest one stops) against a prototype loop here that drops finished sequences from the batch and
its KV cache (`DynamicCache.batch_select_indices`) as soon as they stop; same model, prompts and
sampling settings, so the same distribution of completions (not the same draws). Tokens/s counts kept
tokens for both.

Learner: rolls out one batch (B=16 prompts x k=8, 64 new tokens) with the shipped SFT model through ablate's
engine, then times the learner's work on it, micro-batches of 64 as `stage=rloo` cuts them: the
policy forward + backward of a policy-gradient-shaped loss and the frozen reference's forward. The
variants change only how that work is laid out, not what it computes up to float rounding:

- `current`: as RLOOModule does it: every micro-batch padded to the whole batch's longest sequence;
  float32 reference forward under `torch.no_grad`.
- `trimmed`: each micro-batch cut to its own longest sequence, sequences grouped by length first.
- `bf16 ref`: the reference forward under CPU bf16 autocast (KL only needs its log-probs).
- `trimmed + bf16 ref`: both.

The variants run interleaved (round-robin) `--repeats` times; medians. These are estimates of what
the changes would save inside `time/learn_s`, not changes to ablate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, fmt, machine, markdown_table, median  # noqa: E402,F401


def rollout_batch(batch_prompts: int, k: int, max_new_tokens: int, seed: int):
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.lit.rloo import pad_rollouts
    from ablate.models import encode_prompt, load_tokenizer, prompt_text, resolve_path
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import generate

    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32)
    problems = generate(batch_prompts, seed=seed, labels=False)
    prompts = [encode_prompt(prompt_text(p, "compact", tokenizer), tokenizer) for p in problems]
    rollouts = HFEngine(model, tokenizer).generate(prompts, k, SamplingParams(max_new_tokens=max_new_tokens),
                                                   torch.Generator().manual_seed(seed))
    return model, pad_rollouts(rollouts, tokenizer.pad_token_id)


def compact_generate(model, prompts, k: int, max_new_tokens: int, pad: int, eos: int, generator) -> int:
    """Sample k completions per prompt (temperature 1, no truncation), removing each finished sequence
    from the batch and the KV cache; returns the number of kept tokens (up to and including EOS)."""
    import torch
    from transformers import DynamicCache

    rows = [list(p) for p in prompts for _ in range(k)]
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache, kept = DynamicCache(), 0
    step_input = ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(input_ids=step_input, attention_mask=attention, position_ids=positions,
                           past_key_values=cache, use_cache=True).logits[:, -1].float()
            token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
            kept += token.numel()
            attention = torch.cat([attention, torch.ones_like(token).unsqueeze(-1)], dim=-1)
            running = token != eos
            if not bool(running.any()):
                break
            if not bool(running.all()):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                token, attention, positions = token[keep], attention[keep], positions[keep]
            positions = positions[:, -1:] + 1
            step_input = token.unsqueeze(-1)
    return kept


def generation_options(repeats: int, batch_prompts: int, k: int, max_new_tokens: int) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.models import encode_prompt, load_tokenizer, prompt_text, resolve_path
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import generate

    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32).eval()
    prompts = [encode_prompt(prompt_text(p, "compact", tokenizer), tokenizer)
               for p in generate(batch_prompts, seed=1, labels=False)]
    engine, params = HFEngine(model, tokenizer), SamplingParams(max_new_tokens=max_new_tokens)
    results: dict[str, list[tuple[float, int]]] = {"engine (current)": [], "drop finished rows": []}
    for r in range(repeats + 1):  # the first round warms up
        start = time.perf_counter()
        out = engine.generate(prompts, k, params, torch.Generator().manual_seed(r))
        engine_s = time.perf_counter() - start
        start = time.perf_counter()
        kept = compact_generate(model, prompts, k, max_new_tokens, tokenizer.pad_token_id, tokenizer.eos_token_id,
                                torch.Generator().manual_seed(r))
        compact_s = time.perf_counter() - start
        if r:
            results["engine (current)"].append((engine_s, sum(map(len, out.completion_ids))))
            results["drop finished rows"].append((compact_s, kept))
    base = median(s for s, _ in results["engine (current)"])
    rows = [[name, fmt(median(s for s, _ in v), 3), fmt(median(t for _, t in v), 0),
             fmt(median(t / s for s, t in v), 0), f"{1 - median(s for s, _ in v) / base:+.0%}" if i else ""]
            for i, (name, v) in enumerate(results.items())]
    return markdown_table(["generation", "s per batch", "kept tokens", "tokens/s", "saved vs current"], rows)


def micro_batches(batch, micro: int, trimmed: bool):
    import torch

    lengths = batch["attention_mask"].sum(-1)
    order = torch.argsort(lengths, descending=True) if trimmed else torch.arange(len(lengths))
    for start in range(0, len(order), micro):
        rows = order[start:start + micro]
        width = int(lengths[rows].max()) if trimmed else batch["input_ids"].size(1)
        yield batch["input_ids"][rows, :width], batch["attention_mask"][rows, :width], batch["loss_mask"][rows, :width - 1]


def learner_pass(policy, reference, batch, micro: int, trimmed: bool, bf16_reference: bool) -> dict[str, float]:
    """Seconds of the reference forwards and of the policy forwards + backwards over the batch."""
    import torch

    from ablate.objectives import token_logprobs

    ref_s = pol_s = 0.0
    policy.zero_grad(set_to_none=True)
    for ids, attention, mask in micro_batches(batch, micro, trimmed):
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_reference):
            ref = token_logprobs(reference(input_ids=ids, attention_mask=attention).logits[:, :-1].float(), ids[:, 1:])
        ref_s += time.perf_counter() - start
        start = time.perf_counter()
        logprobs = token_logprobs(policy(input_ids=ids, attention_mask=attention).logits[:, :-1], ids[:, 1:])
        loss = ((logprobs - ref.detach()) * mask).sum() / mask.sum()
        loss.backward()
        pol_s += time.perf_counter() - start
    return {"reference": ref_s, "policy": pol_s, "total": ref_s + pol_s}


def main() -> None:
    import copy

    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batch-prompts", type=int, default=16)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    policy, batch = rollout_batch(args.batch_prompts, args.k, args.max_new_tokens, seed=0)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    policy.train()
    variants = {"current": (False, False), "trimmed": (True, False), "bf16 ref": (False, True),
                "trimmed + bf16 ref": (True, True)}
    times: dict[str, list[dict]] = {name: [] for name in variants}
    learner_pass(policy, reference, batch, args.micro_batch, False, False)  # warm-up
    for _ in range(args.repeats):
        for name, (trimmed, bf16) in variants.items():
            times[name].append(learner_pass(policy, reference, batch, args.micro_batch, trimmed, bf16))
    real = int(batch["attention_mask"].sum())
    padded_full = batch["attention_mask"].numel()
    padded_trim = sum(ids.numel() for ids, _, _ in micro_batches(batch, args.micro_batch, True))
    base = median(t["total"] for t in times["current"])
    rows = []
    for name in variants:
        ref, pol, total = (median(t[key] for t in times[name]) for key in ("reference", "policy", "total"))
        rows.append([name, fmt(ref, 3), fmt(pol, 3), fmt(total, 3), f"{1 - total / base:+.0%}".replace("+-", "-")
                     if name != "current" else ""])
    print(f"machine: {machine()}")
    print(f"one batch: {batch['input_ids'].size(0)} sequences, {real} real tokens; computed tokens "
          f"{padded_full} padded to the batch's longest, {padded_trim} trimmed per micro-batch "
          f"({1 - padded_trim / padded_full:.0%} fewer); {args.repeats} interleaved repeats\n")
    print(markdown_table(["learner variant", "reference fwd s", "policy fwd+bwd s", "total s", "saved vs current"],
                         rows))
    print(f"\ngeneration, {args.batch_prompts} prompts x {args.k} samples, {args.max_new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats\n")
    print(generation_options(args.repeats, args.batch_prompts, args.k, args.max_new_tokens))


if __name__ == "__main__":
    main()
