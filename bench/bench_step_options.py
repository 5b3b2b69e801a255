"""What cheaper layouts of the RL step's work would save (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_step_options.py              # 5 interleaved repeats
    PYTHONPATH=src python bench/bench_step_options.py --repeats 9 --threads 1

Generation: ablate's engine (`HFEngine.generate`, which drops finished sequences from the batch and its
KV cache as soon as they stop) against a prototype loop here, run both ways: keeping finished rows
until the longest sequence stops (the engine before it dropped them) and dropping them
(`DynamicCache.batch_select_indices`, as the engine does); same model, prompts and sampling settings,
so the same distribution of completions (not the same draws). Tokens/s counts kept tokens.

Learner: rolls out one batch (B=16 prompts x k=8, 64 new tokens) with the shipped SFT model through ablate's
engine, then times the learner's work on it in micro-batches of 64: the policy forward + backward of a
policy-gradient-shaped loss and the frozen reference's forward. The variants change only how that
work is laid out, not what it computes up to float rounding:

- `padded`: every micro-batch padded to the whole batch's longest sequence (RLOOModule before it cut them).
- `trimmed`: each micro-batch cut to its own longest sequence, batch order kept.
- `current`: as RLOOModule does it: sequences grouped by length, then each micro-batch cut to its longest,
  forwards without an attention mask (right padding under causal attention: the same logits, and SDPA's
  faster causal path).
- `current + bf16 ref`: with the reference held in bfloat16 (`stage.reference_dtype=bfloat16`).

The variants run interleaved (round-robin) `--repeats` times; medians. These are estimates of what
the layouts would save inside `time/learn_s`; `current` and `current + bf16 ref` are what `stage=rloo` runs.
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

    from ablate.lit.rollout_batch import pad_rollouts
    from ablate.models import encode_prompt, load_tokenizer, prompt_text, resolve_path
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import CountdownTask, generate

    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32)
    problems = generate(batch_prompts, seed=seed, labels=False)
    prompts = [encode_prompt(prompt_text(CountdownTask({}, None), p, "compact", tokenizer), tokenizer) for p in problems]
    rollouts = HFEngine(model, tokenizer).generate(prompts, k, SamplingParams(max_new_tokens=max_new_tokens),
                                                   torch.Generator().manual_seed(seed))
    return model, pad_rollouts(rollouts, tokenizer.pad_token_id)


def prototype_generate(model, prompts, k: int, max_new_tokens: int, pad: int, eos: int, generator,
                       drop_finished: bool) -> int:
    """Sample k completions per prompt (temperature 1, no truncation), keeping finished sequences in the
    batch until all stop or removing them from the batch and the KV cache; returns the number of kept
    tokens (up to and including EOS)."""
    import torch
    from transformers import DynamicCache

    from ablate.rollout.hf import cache_kwarg

    rows = [list(p) for p in prompts for _ in range(k)]
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache, kept = DynamicCache(), 0
    finished = torch.zeros(len(rows), dtype=torch.bool)
    step_input = ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(input_ids=step_input, attention_mask=attention, position_ids=positions,
                           use_cache=True, **{cache_kwarg(model): cache}).logits[:, -1].float()
            token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
            if not drop_finished:
                token = torch.where(finished, torch.full_like(token, pad), token)
            kept += int((~finished).sum()) if not drop_finished else token.numel()
            attention = torch.cat([attention, torch.ones_like(token).unsqueeze(-1)], dim=-1)
            running = token != eos
            finished = finished | ~running
            if not bool(running.any()) or bool(finished.all()):
                break
            if drop_finished and not bool(running.all()):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                token, attention, positions = token[keep], attention[keep], positions[keep]
                finished = finished[keep]
            positions = positions[:, -1:] + 1
            step_input = token.unsqueeze(-1)
    return kept


def generation_options(repeats: int, batch_prompts: int, k: int, max_new_tokens: int) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.models import encode_prompt, load_tokenizer, prompt_text, resolve_path
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import CountdownTask, generate

    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32).eval()
    prompts = [encode_prompt(prompt_text(CountdownTask({}, None), p, "compact", tokenizer), tokenizer)
               for p in generate(batch_prompts, seed=1, labels=False)]
    engine, params = HFEngine(model, tokenizer), SamplingParams(max_new_tokens=max_new_tokens)
    results: dict[str, list[tuple[float, int]]] = {"engine (current)": [], "prototype, finished rows kept": [],
                                                   "prototype, finished rows dropped": []}
    for r in range(repeats + 1):  # the first round warms up
        start = time.perf_counter()
        out = engine.generate(prompts, k, params, torch.Generator().manual_seed(r))
        timed = [(time.perf_counter() - start, sum(map(len, out.completion_ids)))]
        for drop in (False, True):
            start = time.perf_counter()
            kept = prototype_generate(model, prompts, k, max_new_tokens, tokenizer.pad_token_id,
                                      tokenizer.eos_token_id, torch.Generator().manual_seed(r), drop)
            timed.append((time.perf_counter() - start, kept))
        if r:
            for name, result in zip(results, timed):
                results[name].append(result)
    base = median(s for s, _ in results["prototype, finished rows kept"])
    rows = [[name, fmt(median(s for s, _ in v), 3), fmt(median(t for _, t in v), 0),
             fmt(median(t / s for s, t in v), 0),
             f"{1 - median(s for s, _ in v) / base:+.0%}" if name != "prototype, finished rows kept" else ""]
            for name, v in results.items()]
    return markdown_table(["generation", "s per batch", "kept tokens", "tokens/s", "saved vs rows kept"], rows)


def micro_batches(batch, micro: int, layout: str):
    import torch

    lengths = batch["attention_mask"].sum(-1)
    order = torch.argsort(lengths, descending=True) if layout == "sorted" else torch.arange(len(lengths))
    for start in range(0, len(order), micro):
        rows = order[start:start + micro]
        width = batch["input_ids"].size(1) if layout == "padded" else int(lengths[rows].max())
        yield batch["input_ids"][rows, :width], batch["attention_mask"][rows, :width], batch["loss_mask"][rows, :width - 1]


def learner_pass(policy, reference, batch, micro: int, layout: str) -> dict[str, float]:
    """Seconds of the reference forwards and of the policy forwards + backwards over the batch."""
    import torch

    from ablate.objectives import token_logprobs

    ref_s = pol_s = 0.0
    policy.zero_grad(set_to_none=True)
    for ids, attention, mask in micro_batches(batch, micro, layout):
        attention = None if layout == "sorted" else attention  # RLOOModule: right padding needs no mask
        start = time.perf_counter()
        with torch.no_grad():
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
    reference_bf16 = copy.deepcopy(reference).to(torch.bfloat16)  # as stage.reference_dtype=bfloat16 holds it
    policy.train()
    variants = {"padded": ("padded", reference), "trimmed": ("trimmed", reference), "current": ("sorted", reference),
                "current + bf16 ref": ("sorted", reference_bf16)}
    times: dict[str, list[dict]] = {name: [] for name in variants}
    for layout, ref in variants.values():  # warm-up
        learner_pass(policy, ref, batch, args.micro_batch, layout)
    for _ in range(args.repeats):
        for name, (layout, ref) in variants.items():
            times[name].append(learner_pass(policy, ref, batch, args.micro_batch, layout))
    real = int(batch["attention_mask"].sum())
    computed = {layout: sum(ids.numel() for ids, _, _ in micro_batches(batch, args.micro_batch, layout))
                for layout in ("padded", "trimmed", "sorted")}
    base = median(t["total"] for t in times["padded"])
    rows = []
    for name in variants:
        ref, pol, total = (median(t[key] for t in times[name]) for key in ("reference", "policy", "total"))
        rows.append([name, fmt(ref, 3), fmt(pol, 3), fmt(total, 3), f"{1 - total / base:+.0%}".replace("+-", "-")
                     if name != "padded" else ""])
    print(f"machine: {machine()}")
    print(f"one batch: {batch['input_ids'].size(0)} sequences, {real} real tokens; computed tokens: padded "
          f"{computed['padded']}, trimmed {computed['trimmed']}, current (grouped by length) {computed['sorted']}; "
          f"{args.repeats} interleaved repeats\n")
    print(markdown_table(["learner variant", "reference fwd s", "policy fwd+bwd s", "total s", "saved vs padded"],
                         rows))
    print(f"\ngeneration, {args.batch_prompts} prompts x {args.k} samples, {args.max_new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats\n")
    print(generation_options(args.repeats, args.batch_prompts, args.k, args.max_new_tokens))


if __name__ == "__main__":
    main()
