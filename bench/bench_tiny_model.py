"""Tiny-model throughput on this machine: SFT tokens/s per model size, and eval samples/s.

    python bench/bench_tiny_model.py                # the sizes considered for model=tiny
    python bench/bench_tiny_model.py --steps 20     # more steps per size

Prints figures; asserts nothing. SFT tokens/s counts every token of the batch (prompt + trace,
padding excluded) through forward, backward and an AdamW step, as in `stage=sft`.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from omegaconf import OmegaConf

from ablate.config import CONF_DIR
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine
from ablate.lit.sft_data import TraceDataset, pad_batch
from ablate.models import encode_prompt, load_model, load_tokenizer, parameter_count, prompt_text
from ablate.objectives import sft_loss
from ablate.tasks.countdown import CountdownTask, generate

SIZES = {  # name: (hidden, intermediate, layers, heads)
    "0.2M": (64, 256, 3, 4),
    "0.8M": (128, 512, 4, 4),
    "1.1M": (128, 512, 6, 4),
    "2.4M": (192, 768, 6, 6),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    tokenizer = load_tokenizer(base)
    problems = generate(args.batch_size * (args.steps + 2), seed=0, labels=False)
    data = TraceDataset(CountdownTask({}, None), problems, tokenizer, "compact", "plain", seed=0, max_length=128,
                        tool_cfg={"kind": "calculator", "prompt": "never"})
    batches = [pad_batch([data[i] for i in range(b * args.batch_size, (b + 1) * args.batch_size)], tokenizer.pad_token_id)
               for b in range(args.steps + 2)]
    print(f"threads {args.threads}, batch {args.batch_size}, mean tokens/example "
          f"{sum(int(b['attention_mask'].sum()) for b in batches) / (len(batches) * args.batch_size):.1f}")
    for name, (hidden, inter, layers, heads) in SIZES.items():
        cfg = OmegaConf.merge(base, {"arch": {"hidden_size": hidden, "intermediate_size": inter,
                                              "num_hidden_layers": layers, "num_attention_heads": heads,
                                              "num_key_value_heads": heads}})
        torch.manual_seed(0)
        model = load_model(cfg, tokenizer)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens, seconds = 0, 0.0
        for step, batch in enumerate(batches):
            start = time.perf_counter()
            loss = sft_loss(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                            batch["labels"])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step >= 2:  # warm-up steps excluded
                seconds += time.perf_counter() - start
                tokens += int(batch["attention_mask"].sum())
        print(f"SFT  {name:>5} ({parameter_count(model) / 1e6:.2f}M params): {tokens / seconds:8,.0f} tokens/s, "
              f"{seconds / args.steps * 1e3:6.0f} ms/step")
        if name == "0.8M":
            eval_speed(model, tokenizer)


def eval_speed(model, tokenizer) -> None:
    """The rollout engine (our sampling loop, used by eval and RL) beside transformers' generate."""
    test = generate(32, seed=1, labels=False)
    prompts = [encode_prompt(prompt_text(CountdownTask({}, None), p, "compact", tokenizer), tokenizer) for p in test]
    params = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=64)
    start = time.perf_counter()
    out = HFEngine(model, tokenizer, batch_size=512).generate(prompts, 16, params, torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - start
    tokens = sum(map(len, out.completion_ids))
    print(f"eval  engine: {len(out.texts) / seconds:8,.0f} samples/s, {tokens / seconds:8,.0f} generated tokens/s "
          f"(512 sequences per call, up to 64 new tokens)")
    pad = tokenizer.pad_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=(ids != pad).long(), do_sample=True, temperature=0.6, top_p=0.95,
                       top_k=20, max_new_tokens=64, num_return_sequences=16, pad_token_id=pad,
                       eos_token_id=tokenizer.eos_token_id)
    print(f"eval  transformers generate, same settings: {len(prompts) * 16 / (time.perf_counter() - start):8,.0f} samples/s")

if __name__ == "__main__":
    main()
