"""Where a decode step of rollout=hf goes on a GPU at the papers' setting: the 0.5B shape (random weights, bf16
autocast as in training), `--rows` sequences, a prompt of 40 tokens, then `--steps` decode steps with the
engine's in-place KV cache and attention mask; the forward and the sampling (`sample_on_device`) timed apart
with CUDA synchronisation. A GPU only.

    PYTHONPATH=src python bench/gpu_decode_profile.py --rows 1024 --steps 64
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--no-mask", action="store_true", help="no attention mask (no left padding): SDPA's GQA path")
    args = p.parse_args()
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.cache_utils import Cache

    from ablate.config import load_group_config
    from ablate.rollout.hf import _GrowingLayer, cache_kwarg, sample_on_device

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**load_group_config("model", "qwen2.5-0.5b-shape")["arch"])).cuda().eval()
    rows, width = args.rows, 40
    cache = Cache(layer_class_to_replicate=lambda: _GrowingLayer(width + args.steps + 1))
    ids = torch.randint(0, 100, (rows, width), device="cuda")
    attention = torch.ones_like(ids)
    positions = torch.arange(width, device="cuda").expand(rows, -1)
    generator = torch.Generator(device="cuda").manual_seed(0)
    forward_s, sample_s = [], []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                       logits_to_keep=1, **{cache_kwarg(model): cache}).logits[:, -1].float()
        for step in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            token, _ = sample_on_device(logits / 1.0, 0, 1.0, generator)
            torch.cuda.synchronize()
            sample_s.append(time.perf_counter() - start)
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
            positions = positions[:, -1:] + 1
            start = time.perf_counter()
            logits = model(input_ids=token[:, None], attention_mask=None if args.no_mask else attention,
                           position_ids=positions, use_cache=True,
                           **{cache_kwarg(model): cache}).logits[:, -1].float()
            torch.cuda.synchronize()
            forward_s.append(time.perf_counter() - start)
    f, s = sorted(forward_s[4:]), sorted(sample_s[4:])
    print(f"{torch.cuda.get_device_name()}: {rows} rows, cache {width}..{width + args.steps} tokens: "
          f"forward median {1000 * f[len(f) // 2]:.1f} ms, sampling median {1000 * s[len(s) // 2]:.2f} ms "
          f"per decode step ({len(f)} steps after 4 warm-up){', no attention mask' if args.no_mask else ''}", flush=True)


if __name__ == "__main__":
    main()
