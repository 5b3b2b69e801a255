"""Where the papers' RL step goes on a GPU, lever by lever, in the configuration training runs (docs/gpu.md).

    python bench/gpu_step.py sample [--rows 1024 --steps 8]                   # sampling one decode step
    python bench/gpu_step.py decode [--rows 1024 --context 512 --steps 48]   # decode-step variants, profiled
    python bench/gpu_step.py learn  [--rows 16 --width 1024 --reps 3]        # learner variants
    python bench/gpu_step.py decode --smoke [--backend eager]                 # the same code on a CPU, seconds
    python bench/gpu_step.py vocab chunked|fused [--rows 2048]               # the vocabulary path alone, any device

`sample`: `sample_on_device` over `--rows` x 151,936 logits, as RL samples (T=1, no filter) and as evaluation does
(T=0.6, top-k 20, top-p 0.95): the median of `--steps` calls.
`decode`: one chunk of `--rows` left-padded prompts of `--context/2..--context` random tokens on the 0.5B shape
(random weights), the static cache sized for `--new-tokens` more (512 + 768 gives a papers chunk's 1,280 slots,
filled to its middle), then `--steps` decode steps, each a forward and `sample_on_device`, under bf16 autocast
with its weight cache OFF (as Lightning 2.6 runs training_step, so fp32 weights are re-cast at every step).
Variants: `eager` (today's default), `eager_bf16` (rollout.dtype=bfloat16: a bf16 copy), `compiled_stock_bf16`
(rollout.compile with transformers' sdpa: K/V expanded to 14 heads under compile), `compiled_bf16` (the folded
heads), `compiled` (folded, fp32 weights); the compiled ones attend the cache by bucket (the filled part rounded
up to 256 slots, ablate.rollout.decoders). Each prints the first step (compile included), the median step, and
a torch.profiler window: host wall time against device-busy time, kernels launched a step, the top kernels. A
compiled variant then frees its static cache as a rollout's end does (lever 3) and decodes a new chunk of the
same shape whose cache is made to land elsewhere (the old blocks held): memory freed, its first steps' times
and the CUDA graphs recorded again (what freeing costs when the allocator does not hand the same blocks back).
How it differs from training: random tokens (no eos: no row leaves the batch), one chunk, no tool, no learner.

`learn`: `--rows` x `--width` tokens through the policy's forward and backward and the reference's forward, bf16
autocast: `chunked` (the checkpointed chunked log-softmax, as before), `fused` (ablate.fused_vocab, the
reference without entropy), `fused_compiled` (and the decoder compiled, as trainer.compile=true now does).
Prints tokens/s, MFU (6 FLOPs a parameter a token, over the card's dense bf16 peak) and peak memory.
`vocab`: log-probs and entropies of `--rows` positions over the 0.5B's head (151,936 x 896), forward and
backward, one variant a process (peak memory is the process's): wall and CPU seconds, peak RSS (or GPU memory).
`--backend eager` traces the compiled variants with torch.compile's eager backend (a CPU smoke test: inductor's
C++ build takes minutes there). Every figure is printed the moment it exists (bench/gpu_stages.sh runs each
under a kill timeout).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

DECODE_VARIANTS = ("eager", "eager_bf16", "compiled_bf16", "compiled_stock_bf16", "compiled")
LEARN_VARIANTS = ("chunked", "fused", "fused_compiled")


def build_model(smoke: bool, device: str) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ablate.config import load_group_config

    arch = dict(load_group_config("model", "qwen2.5-0.5b-shape")["arch"])
    if smoke:  # the same head layout (7 query heads a key/value head), tiny
        arch.update(hidden_size=112, intermediate_size=128, num_hidden_layers=2, num_attention_heads=14,
                    num_key_value_heads=2, vocab_size=5000)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: 494 M parameters initialised on a CPU take seconds
        return Qwen2ForCausalLM(Qwen2Config(**arch))


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def prompts(rows: int, context: int, vocab: int, device: str) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(context // 2, context + 1, (rows,), generator=generator)
    ids = torch.randint(0, vocab, (rows, context), generator=generator)
    attention = (torch.arange(context)[None, :] >= (context - lengths)[:, None]).long()
    ids = ids * attention  # pad id 0 on the left
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), attention.to(device), positions.to(device)


def profile_window(step, n: int, device: str) -> str:
    """n calls of `step` under torch.profiler: host wall time vs the device's busy time, launches, top kernels."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step()
        sync(device)
        wall = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.device_time for e in kernels) / 1e6  # us -> s (kernels may overlap; an upper bound)
    table = prof.key_averages().table(sort_by="cuda_time_total" if device == "cuda" else "cpu_time_total",
                                      row_limit=6, max_name_column_width=60)
    return (f"profile of {n} steps: wall {1000 * wall / n:.2f} ms a step, device busy {1000 * busy / n:.2f} ms a step "
            f"({100 * busy / wall:.0f}%), {len(kernels) / n:.0f} kernels a step\n{table}")


def gib(device: str) -> float:
    return torch.cuda.memory_allocated() / 2**30 if device == "cuda" else float("nan")


def timed(state: dict, step, n: int, device: str) -> tuple[float, list[float]]:
    """The prefill of `state["decoder"]`, then n calls of `step`, each timed to the device's end."""
    start = time.perf_counter()
    state["logits"] = state["decoder"].prefill()
    sync(device)
    prefill, times = time.perf_counter() - start, []
    for _ in range(n):
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return prefill, times


def decode_variant(model, name: str, args, device: str) -> None:
    import ablate.rollout.decoders as decoders
    from ablate.rollout.attention import use_folded
    from ablate.rollout.hf import _cast_copy, device_generator, sample_on_device

    decoders.COMPILE_BACKEND = args.backend
    sampler = _cast_copy(model, torch.bfloat16) if name.endswith("bf16") else model
    if name.startswith("compiled") and "stock" not in name:
        use_folded(sampler)
    ids, attention, positions = prompts(args.rows, args.context, model.config.vocab_size, device)
    extra = {"logits_to_keep": 1}
    steps = decoders.CompiledSteps(sampler) if name.startswith("compiled") else None

    def new_decoder():
        return (decoders.CompiledDecoder(steps, ids, attention, positions, args.new_tokens, extra) if steps else
                decoders.EagerDecoder(sampler, ids, attention, positions, args.new_tokens, extra))

    draw = device_generator(torch.Generator().manual_seed(0), torch.device(device))
    state = {"decoder": new_decoder()}

    def step():
        token, _ = sample_on_device(state["logits"] / 1.0, 0, 1.0, draw)
        state["logits"] = state["decoder"].step(token)

    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False):
        prefill, times = timed(state, step, args.steps, device)
        print(f"decode {name}: {args.rows} rows, prompts {args.context // 2}-{args.context} tokens, cache "
              f"{-(-(args.context + args.new_tokens) // decoders.LENGTH_BUCKET) * decoders.LENGTH_BUCKET} slots, "
              f"prefill {prefill:.2f} s, first step {times[0]:.2f} s (compile included), median step "
              f"{1000 * statistics.median(times[2:]):.2f} ms over {len(times) - 2}"
              + (f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device == "cuda" else ""), flush=True)
        if args.profile:
            print(profile_window(step, args.profile, device), flush=True)
        if steps is not None:
            release(state, steps, step, new_decoder, device)


def release(state: dict, steps, step, new_decoder, device: str) -> None:
    """Lever 3 as a rollout's end does it (CompiledSteps.release), then a new chunk of the same shape whose cache
    cannot take the old blocks (held by a placeholder, as the learner's allocations could): what freeing costs."""
    from ablate.rollout.decoders import compile_counters

    held = gib(device)
    del state["decoder"], state["logits"]
    steps.release()
    freed = held - gib(device)
    placeholder = torch.empty(int(freed * 2**30), dtype=torch.uint8, device=device) if device == "cuda" else None
    records = compile_counters()["rollout/cudagraph_records"]
    state["decoder"] = new_decoder()
    _, times = timed(state, step, 4, device)
    memory = f"{freed:.2f} GiB freed with the static cache" if device == "cuda" else "the static cache freed"
    print(f"release: {memory}; a new chunk, its cache elsewhere: first steps "
          + ", ".join(f"{1000 * t:.1f}" for t in times) + " ms, CUDA graphs recorded again: "
          f"{compile_counters()['rollout/cudagraph_records'] - records:.0f}", flush=True)
    del placeholder


def sample(args, device: str) -> None:
    """sample_on_device over rows x vocabulary logits, RL's settings and evaluation's."""
    from ablate.rollout.hf import device_generator, sample_on_device

    vocab = 5000 if args.smoke else 151_936
    logits = torch.randn(args.rows, vocab, generator=torch.Generator().manual_seed(0)).to(device)
    draw = device_generator(torch.Generator().manual_seed(0), torch.device(device))
    for label, temperature, top_k, top_p in (("RL (T=1)", 1.0, 0, 1.0),
                                             ("evaluation (T=0.6, top-k 20, top-p 0.95)", 0.6, 20, 0.95)):
        times = []
        for _ in range(args.steps + 1):
            sync(device)
            start = time.perf_counter()
            sample_on_device(logits / temperature, top_k, top_p, draw)
            sync(device)
            times.append(time.perf_counter() - start)
        print(f"sample {label}: {args.rows} rows x {vocab} columns, median {1000 * statistics.median(times[1:]):.2f} "
              f"ms over {args.steps} (first {1000 * times[0]:.2f} ms)", flush=True)


def learn_variant(model, name: str, args, device: str) -> None:
    from ablate.fused_vocab import fused_logprobs
    from ablate.lit.micro_batches import LOGIT_CHUNK
    from ablate.objectives import chunked_logprobs
    from ablate.perf import peak_flops

    reference = copy.deepcopy(model).eval().requires_grad_(False).to(torch.bfloat16)
    decoder, ref_decoder, head = model.get_decoder(), reference.get_decoder(), model.get_output_embeddings()
    if name.endswith("compiled"):
        decoder = torch.compile(decoder, dynamic=True, backend=args.backend)
        ref_decoder = torch.compile(ref_decoder, dynamic=True, backend=args.backend)
    fn = chunked_logprobs if name == "chunked" else fused_logprobs
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.width), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    advantages = torch.randn(args.rows, 1, device=device)
    times = []
    for _ in range(args.reps + 1):
        sync(device)
        start = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False):
            with torch.no_grad():
                hidden = ref_decoder(input_ids=ids).last_hidden_state[:, :-1]
                ref = (fn(hidden, ids[:, 1:], reference.get_output_embeddings(), LOGIT_CHUNK) if name == "chunked" else
                       fn(hidden, ids[:, 1:], reference.get_output_embeddings(), LOGIT_CHUNK, entropy=False))[0]
            hidden = decoder(input_ids=ids).last_hidden_state[:, :-1]
            logp, entropy = fn(hidden, ids[:, 1:], head, LOGIT_CHUNK)
            loss = -(advantages * logp).mean() + (logp - ref).pow(2).mean() * 1e-3 - 1e-3 * entropy.mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - start)
    tokens, seconds = args.rows * args.width, statistics.median(times[1:])
    peak = peak_flops(torch.device(device)) if device == "cuda" else None
    mfu = f", MFU {100 * 8 * model.num_parameters() * tokens / seconds / peak:.1f}%" if peak else ""
    print(f"learn {name}: {tokens} tokens, first {times[0]:.2f} s (compile included), median {seconds:.3f} s, "
          f"{tokens / seconds / 1000:.1f} k tokens/s{mfu} (8 FLOPs a parameter a token: policy 6 + reference 2)"
          + (f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device == "cuda" else ""), flush=True)


def vocab(name: str, rows: int) -> None:
    import resource

    from ablate.fused_vocab import fused_logprobs
    from ablate.lit.micro_batches import LOGIT_CHUNK
    from ablate.objectives import chunked_logprobs

    device = "cuda" if torch.cuda.is_available() else "cpu"
    fn = {"fused": fused_logprobs, "chunked": chunked_logprobs}[name]
    torch.manual_seed(0)
    head = torch.nn.Linear(896, 151_936, bias=False, device=device)
    hidden = torch.randn(1, rows, 896, device=device, requires_grad=True)
    tokens = torch.randint(0, 151_936, (1, rows), device=device)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall, cpu = time.perf_counter(), time.process_time()
    logp, entropy = fn(hidden, tokens, head, LOGIT_CHUNK)
    (logp.sum() + 1e-3 * entropy.sum()).backward()
    sync(device)
    peak = (f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if device == "cuda" else
            f"peak RSS above the inputs {(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 2**20:.2f} GiB")
    print(f"vocab {name} on {device} ({torch.get_num_threads()} threads): {rows} positions, forward+backward "
          f"{time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU, {peak}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("sample", "decode", "learn", "vocab"))
    p.add_argument("variant", nargs="?", choices=("chunked", "fused"), help="vocab: which path")
    p.add_argument("--variants", help="comma-separated (decode: %s; learn: %s)" % (",".join(DECODE_VARIANTS),
                                                                                  ",".join(LEARN_VARIANTS)))
    p.add_argument("--rows", type=int)
    p.add_argument("--context", type=int, default=512, help="decode: longest prompt (the shortest is half)")
    p.add_argument("--new-tokens", type=int, default=1024, help="decode: the chunk's budget (sizes the caches)")
    p.add_argument("--steps", type=int, default=48, help="decode, sample: steps (calls) timed one by one")
    p.add_argument("--profile", type=int, default=8, help="decode: steps in the profiler window (0: none)")
    p.add_argument("--width", type=int, default=1024, help="learn: tokens a row")
    p.add_argument("--reps", type=int, default=3, help="learn: timed repetitions after one warm-up")
    p.add_argument("--smoke", action="store_true", help="a tiny shape with the same head layout, on the CPU")
    p.add_argument("--backend", default="inductor", choices=("inductor", "eager"),
                   help="torch.compile's backend for the compiled variants (eager: tracing only, a CPU smoke test)")
    args = p.parse_args()
    if args.what == "vocab":
        return vocab(args.variant or "fused", args.rows or 2048)
    device = "cpu" if args.smoke else "cuda"
    if args.smoke:
        args.rows = min(args.rows or 4, 4)  # the stages' GPU sizes, cut to the smoke's
        args.context, args.new_tokens, args.steps, args.width = min(args.context, 16), 32, min(args.steps, 6), 32
        args.profile = min(args.profile, 2)
    if args.what == "sample":
        args.rows = args.rows or 1024
        return sample(args, device)
    model = build_model(args.smoke, device)
    variants = (args.variants.split(",") if args.variants else
                DECODE_VARIANTS if args.what == "decode" else LEARN_VARIANTS)
    for name in variants:
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if args.what == "decode":
            args.rows = args.rows or 1024
            decode_variant(model, name, args, device)
        else:
            args.rows = args.rows or 16
            learn_variant(model, name, args, device)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
