"""What a bfloat16 reference (`stage.reference_dtype=bfloat16`, or `auto` where the CPU/GPU multiplies bf16
natively) does to the KL term and to the reference's forward time (figures printed, not asserted).

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_reference_dtype.py              # trains 100 steps first
    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/bench_reference_dtype.py --policy RUN_DIR/model

The policy is an RL-trained one (default: a default `stage=rloo` run of `--steps` steps from the shipped SFT
model, trained here; or `--policy`, a saved model such as a run's `model/`), since the KL term matters once
the policy has moved from its reference. On `--batches` batches of its own rollouts (B=16 prompts x k=8, the
default RL batch, train split) the reference (`builtin:tiny-sft`) is evaluated in float32 and in bfloat16:
- the batch's KL estimate (token mean, as the loss aggregates it) under each, for k1 and k3;
- |log pi_ref(bf16) - log pi_ref(fp32)| per token (the rounding the KL term then carries);
- what the difference moves in the loss: kl_coef x (KL_bf16 - KL_fp32) against the policy-gradient loss's
  typical size;
- the reference forward's time in each dtype, interleaved (medians).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt, machine, markdown_table, run_ablate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", help="a saved RL policy (a run's model/ directory); default: train one here")
    parser.add_argument("--steps", type=int, default=100, help="RL steps of the policy trained here (default 100)")
    parser.add_argument("--batches", type=int, default=8, help="rollout batches to measure on (default 8)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing repeats per batch (default 5)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from ablate.lit.rollout_batch import pad_rollouts
    from ablate.models import encode_prompt, load_tokenizer, prompt_text, resolve_path
    from ablate.objectives import aggregate, kl_penalty, token_logprobs
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import CountdownTask, generate

    torch.set_num_threads(args.threads)
    print(machine())
    print(f"bf16 matmuls: CPU avx512_bf16 {torch.cpu._is_avx512_bf16_supported()}, AMX "
          f"{torch.cpu._is_amx_tile_supported()}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        policy_path = args.policy
        if policy_path is None:
            run_ablate([f"stage.max_steps={args.steps}", "seed=0"], Path(tmp) / "run")
            policy_path = str(Path(tmp) / "run" / "model")
        policy = AutoModelForCausalLM.from_pretrained(policy_path, dtype=torch.float32).eval()
    reference32 = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"), dtype=torch.float32).eval()
    reference16 = copy.deepcopy(reference32).to(torch.bfloat16)  # as RLOOModule holds it
    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    engine = HFEngine(policy, tokenizer)
    kl_coef = 1e-3  # stage=rloo's default
    rows, token_diffs, times = [], [], {"float32": [], "bfloat16": []}
    for batch in range(args.batches):
        problems = generate(16, seed=1000 + batch, labels=False)
        prompts = [encode_prompt(prompt_text(CountdownTask({}, None), p, "compact", tokenizer), tokenizer) for p in problems]
        rollouts = engine.generate(prompts, 8, SamplingParams(max_new_tokens=64), torch.Generator().manual_seed(batch))
        padded = pad_rollouts(rollouts, tokenizer.pad_token_id)
        ids, mask = padded["input_ids"], padded["loss_mask"]
        with torch.no_grad():
            logprobs = token_logprobs(policy(input_ids=ids).logits[:, :-1], ids[:, 1:])
            ref = {}
            for _ in range(args.repeats):
                for name, model in (("float32", reference32), ("bfloat16", reference16)):
                    start = time.perf_counter()
                    logits = model(input_ids=ids).logits[:, :-1]
                    times[name].append(time.perf_counter() - start)
                    ref[name] = token_logprobs(logits.float(), ids[:, 1:])
        real = mask > 0
        token_diffs.append((ref["bfloat16"] - ref["float32"]).abs()[real])
        row = {"batch": batch}
        for estimator in ("k1", "k3"):
            for name in ("float32", "bfloat16"):
                row[f"{estimator}_{name}"] = float(aggregate(kl_penalty(logprobs, ref[name], estimator), mask, "token_mean"))
        rows.append(row)
    diffs = torch.cat(token_diffs)
    print(f"\npolicy: {args.policy or f'default stage=rloo, {args.steps} steps, seed 0 (trained here)'}; "
          f"{args.batches} batches of 16 prompts x 8 samples, 64 new tokens; {int(diffs.numel()):,} completion tokens\n")
    table = []
    for estimator in ("k1", "k3"):
        kl32 = [r[f"{estimator}_float32"] for r in rows]
        kl16 = [r[f"{estimator}_bfloat16"] for r in rows]
        delta = [b - a for a, b in zip(kl32, kl16)]
        table.append([estimator, fmt(statistics.mean(kl32), 5), fmt(statistics.mean(kl16), 5),
                      f"{statistics.mean(delta):+.2e}", f"{max(abs(d) for d in delta):.2e}",
                      f"{100 * statistics.mean(delta) / statistics.mean(kl32):+.2f}%",
                      f"{kl_coef * max(abs(d) for d in delta):.1e}"])
    print(markdown_table(["KL estimator", "KL, fp32 reference", "KL, bf16 reference", "mean difference",
                          "largest |difference| (a batch)", "relative", "in the loss (x kl_coef 1e-3)"], table))
    print(f"\nper token |log pi_ref(bf16) - log pi_ref(fp32)|: mean {float(diffs.mean()):.2e}, "
          f"median {float(diffs.median()):.2e}, 99th percentile {float(diffs.quantile(0.99)):.2e}, "
          f"max {float(diffs.max()):.2e}")
    t32, t16 = statistics.median(times["float32"]), statistics.median(times["bfloat16"])
    print(f"reference forward of one batch (128 sequences, unsplit): float32 {t32:.3f} s, bfloat16 {t16:.3f} s "
          f"({t32 / t16:.2f}x), medians of {len(times['float32'])} interleaved")
    print(f"({time.monotonic() - started:.0f} s; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
