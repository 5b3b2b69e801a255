"""The GPU tier: its configs, a CPU dry run of them, and the timing of one RLOO step at the papers' scale.

    bash bench/gpu_acceptance.sh                # a GPU machine: the vllm extra, the gpu tests, then --time
    bash bench/gpu_acceptance.sh --dry-run      # anywhere: python bench/gpu_acceptance.py --dry-run
    python bench/gpu_acceptance.py --time [--steps 2 --warmup 1] [-- overrides]

`CONFIGS` are the runs of tests/test_gpu.py (marked gpu): a small Qwen2 model with head size 64 (vLLM's
GPU attention takes multiples of 32 up to 256; experiment=smoke's 16 is not one), random init and the
tiny tokenizer, so nothing comes from the Hub. `TIMING` is docs/gpu.md's setting on Qwen2.5-0.5B's
architecture with random weights (model=qwen2.5-0.5b-shape): B=128 prompts x k=8 samples, up to 1,024
new tokens, rollout=vllm colocated in bf16. `--dry-run` composes and checks every one of them on any
machine and reports what a GPU run needs from the environment; `--time` prints step time, generation
tokens/s, the weight-sync share and peak memory. docs/gpu.md says what to expect and how to read it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (compose, median, project_requirements, requirement_name, run_ablate,  # noqa: E402
                     step_seconds)

SMALL_QWEN2 = ["experiment=smoke", "model.arch.hidden_size=256", "model.arch.intermediate_size=512",
               "model.arch.num_hidden_layers=2", "model.arch.num_attention_heads=4",
               "model.arch.num_key_value_heads=2", "trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]
TWO_STEPS = ["stage.max_steps=2", "stage.warmup_steps=1", "stage.checkpoint_every=1", "upstream.sft.max_steps=2",
             "upstream.sft.warmup_steps=1", "upstream.sft.checkpoint_every=1"]
CONFIGS = {
    "sft_bf16": [*SMALL_QWEN2, "stage=sft", *TWO_STEPS],
    # weights pushed in place after each step; validation after each step runs on the GPU too
    "rloo_vllm": [*SMALL_QWEN2, "stage=rloo", *TWO_STEPS, "rollout=vllm", "rollout.dtype=bfloat16", "eval.every=1"],
    # the default engine on the GPU: sampling on the device, token-budget micro-batches
    "rloo_hf": [*SMALL_QWEN2, "stage=rloo", *TWO_STEPS, "rollout=hf", "stage.micro_batch_tokens=4096", "eval.every=1"],
    "dpo_bf16": [*SMALL_QWEN2, "stage=dpo", *TWO_STEPS],
    # every visible GPU (devices=-1): one process each, re-launched by Lightning
    "sft_ddp": [*SMALL_QWEN2, "trainer=ddp", "stage=sft", *TWO_STEPS],
}
TIMING = ["stage=rloo", "stage.init=scratch", "model=qwen2.5-0.5b-shape", "rollout=vllm", "rollout.dtype=bfloat16",
          "rollout.enforce_eager=false", "rollout.kv_cache_memory_bytes=null", "rollout.gpu_memory_utilization=0.35",
          "stage.batch_prompts=128", "stage.k=8", "stage.sampling.max_new_tokens=1024", "stage.micro_batch=8",
          "stage.reference_dtype=bfloat16", "trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]
# rollout=hf (the default engine, and the one an offline GPU node has) at three sizes of the 0.5B shape; the
# papers' setting is B=128 x k=8, 1,024 new tokens. One chunk of sequences decodes at once (rollout.batch_size).
HF_BASE = ["stage=rloo", "stage.init=scratch", "model=qwen2.5-0.5b-shape", "rollout=hf",
           "stage.reference_dtype=bfloat16", "trainer.accelerator=gpu", "trainer.precision=bf16-mixed",
           "stage.micro_batch_tokens=16384", "eval.limit=1", "eval.n=1", "eval.ks=[1]"]
HF_STAGES = {
    "small": [*HF_BASE, "stage.batch_prompts=16", "stage.k=8", "stage.sampling.max_new_tokens=256", "rollout.batch_size=128"],
    "medium": [*HF_BASE, "stage.batch_prompts=64", "stage.k=8", "stage.sampling.max_new_tokens=512", "rollout.batch_size=512"],
    "papers": [*HF_BASE, "stage.batch_prompts=128", "stage.k=8", "stage.sampling.max_new_tokens=1024",
               "rollout.batch_size=1024"],
}
ALL = {**CONFIGS, "timing_0.5b": TIMING, **{f"hf_{name}": o for name, o in HF_STAGES.items()}}
VLLM_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"


def check_here(overrides: list[str]) -> str:
    """Compose `overrides` and run every config check. Where vLLM is not installed, a rollout=vllm config is
    composed as is (its keys and types) and checked with rollout=hf: the vLLM checks need the package."""
    from ablate.checks import check_config

    cfg = compose(overrides)
    if cfg.rollout.name == "vllm" and importlib.util.find_spec("vllm") is None:
        check_config(compose([o for o in overrides if not o.startswith("rollout")] + ["rollout=hf"]))
        return "composes; checks pass with rollout=hf (rollout=vllm's own need vLLM installed)"
    check_config(cfg)
    return "composes; checks pass"


def environment() -> list[tuple[str, bool, str]]:
    """(what, ready for the GPU run, detail) for each thing the GPU run needs from this machine."""
    import torch

    rows = [("python", sys.version_info >= (3, 10), platform.python_version())]
    pin = next(r for r in project_requirements() if requirement_name(r) == "torch")
    rows.append(("torch", torch.__version__.split("+")[0] == pin.split("==")[1], f"{torch.__version__} (pyproject: {pin})"))
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        total = torch.cuda.get_device_properties(0).total_memory / 2**30
        rows.append(("CUDA GPUs", True, f"{len(names)}: {', '.join(names)} ({total:.0f} GiB each)"))
        rows.append(("bf16", torch.cuda.is_bf16_supported(), "trainer.precision=bf16-mixed and rollout.dtype=bfloat16"))
        major, minor = torch.cuda.get_device_capability(0)
        rows.append(("compute capability", major >= 8, f"{major}.{minor} (FlashAttention: 8.0 or newer)"))
    else:
        rows.append(("CUDA GPUs", False, "none visible to torch: the gpu tests skip here, --time refuses"))
    nvidia = shutil.which("nvidia-smi")
    rows.append(("nvidia-smi", nvidia is not None, nvidia or "not on PATH (no NVIDIA driver tools)"))
    (vllm_pin,) = project_requirements("vllm")
    if importlib.util.find_spec("vllm") is None:
        rows.append(("vllm", False, f"not installed: gpu_acceptance.sh installs it ({vllm_pin}, pip install -e "
                                    "'.[vllm]'); with --no-install or --wheels DIR it skips the rollout=vllm parts"))
    else:
        from importlib import metadata

        version = metadata.version("vllm")
        rows.append(("vllm", version == vllm_pin.split("==")[1], f"{version} (pyproject: {vllm_pin})"))
    setting = os.environ.get(VLLM_ENV, "0")
    rows.append((VLLM_ENV, setting == "0", f"{setting!r}: must be unset or 0 (the engine runs in the training process)"))
    rows.append(("pip", importlib.util.find_spec("pip") is not None, "installs the vllm extra"))
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    rows.append(("free disk (tmp)", free >= 10, f"{free:.0f} GiB (the 0.5B run's init export and checkpoints: ~10 GiB)"))
    return rows


def dry_run() -> int:
    """Compose and check every GPU config (exit 1 if one fails), then report the environment."""
    failed = 0
    print("GPU configs (bench/gpu_acceptance.py; tests/test_gpu.py runs all but timing_0.5b):")
    for name, overrides in ALL.items():
        try:
            print(f"  {name:12} ok: {check_here(overrides)}")
        except Exception as err:  # ConfigError, or Hydra's own composition errors
            failed += 1
            print(f"  {name:12} FAILED: {type(err).__name__}: {err}")
    print("environment (what the GPU run needs; not needed for this dry run):")
    rows = environment()
    for what, ready, detail in rows:
        print(f"  {what:30} {'ok' if ready else 'MISSING'}  {detail}")
    missing = [what for what, ready, _ in rows if not ready]
    print(f"dry run: {len(ALL) - failed}/{len(ALL)} configs ok; "
          + (f"a GPU run here would lack: {', '.join(missing)}" if missing else "this machine can run the GPU tier"))
    return 1 if failed else 0


def memory_callback():
    """A Lightning callback: the peak of torch's CUDA allocator in each step (vLLM's weights and KV cache
    included: they live in this process), in GiB."""
    import lightning as L
    import torch

    class PeakMemory(L.Callback):
        def __init__(self):
            self.peaks: list[float] = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            torch.cuda.reset_peak_memory_stats()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.peaks.append(torch.cuda.max_memory_allocated() / 2**30)

    return PeakMemory()


def time_step(steps: int, warmup: int, extra: list[str]) -> int:
    """Run TIMING for warmup + steps RLOO steps in this process and print the figures of the measured ones."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--time needs a CUDA GPU (torch sees none); on a CPU machine use --dry-run")
    memory = memory_callback()
    overrides = [*TIMING, f"stage.max_steps={warmup + steps}", *extra]
    print("timing: python -m ablate.train " + " ".join(overrides), flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as tmp:
        rows = run_ablate(overrides, Path(tmp) / "run", callbacks=[memory])
    free, total = torch.cuda.mem_get_info()
    print(report(rows, memory.peaks, warmup, (total - free) / 2**30, total / 2**30))
    return 0


def step_printer(stage: str, out: Path | None):
    """A Lightning callback that prints each step's figures the moment the step ends (and appends them to
    `out`, one JSON line each), so a stage cut short by its timeout still reports the steps it finished."""
    import json
    import time

    import lightning as L

    class PrintStep(L.Callback):
        def __init__(self):
            self.start = time.monotonic()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            m = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
            row = {"stage": stage, "step": trainer.global_step, "wall_s": round(time.monotonic() - self.start, 1),
                   **{k: m.get(f"time/{k}") for k in ("generate_s", "learn_s", "generate_tokens_per_s",
                                                         "learner_tokens_per_s", "learner_mfu", "peak_gpu_memory_gib")},
                   "response_length": m.get("train/response_length"),
                   "compiled_graphs": m.get("rollout/compiled_graphs"),
                   "cudagraph_records": m.get("rollout/cudagraph_records")}
            print(json.dumps(row), flush=True)
            if out is not None:
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            self.start = time.monotonic()

    return PrintStep()


# --stage NAME --smoke: the stage's code path on a CPU in seconds (bench/gpu_stages.sh --smoke), the tiny model of
# experiment=smoke; rollout.compile there traced by torch.compile's eager backend (inductor's C++ build takes minutes)
SMOKE_STAGE = ["experiment=smoke", "stage=rloo", "stage.warmup_steps=1", "eval.limit=1", "eval.n=1", "eval.ks=[1]"]


def time_hf_stage(stage: str, steps: int, out: Path | None, extra: list[str], smoke: bool = False) -> int:
    """RLOO of the 0.5B shape with rollout=hf at HF_STAGES[stage], `steps` steps, each step's figures printed."""
    import torch

    if smoke:
        import ablate.rollout.decoders as decoders

        decoders.COMPILE_BACKEND = "eager"
    elif not torch.cuda.is_available():
        raise SystemExit("--stage needs a CUDA GPU (torch sees none); on a CPU machine use --dry-run (or --smoke)")
    base = SMOKE_STAGE if smoke else HF_STAGES[stage]
    overrides = [*base, f"stage.max_steps={steps}", "stage.checkpoint_every=1000", *extra]
    print(f"stage {stage}: python -m ablate.train " + " ".join(overrides), flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-stage-") as tmp:
        run_ablate(overrides, Path(tmp) / "run", callbacks=[step_printer(stage, out)])
    return 0


def report(rows: list[dict], peaks: list[float], warmup: int, used_gib: float, total_gib: float) -> str:
    """The figures of the steps after `warmup` (medians), as docs/gpu.md reads them."""
    steps = step_seconds(rows)[warmup:]
    measured = rows[warmup:]
    phase = lambda name: median(r.get(f"time/{name}_s", float("nan")) for r in measured)  # noqa: E731
    step = median(steps)
    lines = [f"steps measured: {len(steps)} after {warmup} warm-up (medians)",
             f"step time:            {step:8.2f} s   (docs/gpu.md expects ~20-30 s on one H100)",
             f"generation:           {phase('generate'):8.2f} s   "
             f"{median(r['time/generate_tokens_per_s'] for r in measured):,.0f} tokens/s",
             f"learn:                {phase('learn'):8.2f} s   (reference, policy forward, backward, optimizer)",
             f"weight sync:          {phase('sync'):8.3f} s   {phase('sync') / step:.1%} of the step",
             f"response length:      {median(r['train/response_length'] for r in measured):8.0f} tokens (mean per rollout)",
             f"peak memory (torch):  {max(peaks[warmup:] or peaks):8.1f} GiB  (learner + vLLM in this process)",
             f"device memory in use: {used_gib:8.1f} of {total_gib:.0f} GiB at the end"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="compose and check every GPU config; report the environment")
    mode.add_argument("--time", action="store_true", help="time the RLOO step of the 0.5B shape (a GPU)")
    mode.add_argument("--stage", choices=tuple(HF_STAGES), help="RLOO of the 0.5B shape with rollout=hf at this size")
    parser.add_argument("--out", type=Path, help="with --stage: append each step's figures here (JSON lines)")
    parser.add_argument("--smoke", action="store_true", help="with --stage: its code path on a CPU, the tiny model")
    parser.add_argument("--steps", type=int, default=2, help="measured steps")
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out (vLLM's CUDA graphs, allocator)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the timing run (after --)")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.stage:
        return time_hf_stage(args.stage, args.steps, args.out, args.overrides, args.smoke)
    return time_step(args.steps, args.warmup, args.overrides)


if __name__ == "__main__":
    sys.exit(main())
