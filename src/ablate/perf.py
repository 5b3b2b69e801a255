"""Throughput of one RL step, as verl's `perf/` and prime-rl's benchmarks report it: generated and learner
tokens per second, model FLOPs utilisation (MFU) and peak GPU memory. Logged under `time/` with the phase
times (they vary from run to run, so the goldens leave them out)."""

from __future__ import annotations

import torch

# Dense bf16 peak of the data sheets, TFLOP/s, by a substring of torch.cuda.get_device_name(); MFU is logged
# only where the card is named here (a CPU has no meaningful peak).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
                    "A10G": 125.0, "RTX 4090": 165.0}


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None (a CPU, an unlisted card)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tflops * 1e12 for key, tflops in PEAK_BF16_TFLOPS.items() if key in name), None)


def step_throughput(generate_s: float, learn_s: float, generated_tokens: int, learner_tokens: int,
                    parameters: int, reference: bool, device: torch.device) -> dict[str, float]:
    """`time/*` throughput metrics of one step. The learner's FLOPs are 6 per parameter per token (forward and
    backward) plus 2 for the reference's forward (Kaplan et al. 2020's approximation, as verl's MFU)."""
    metrics = {"time/generate_tokens_per_s": generated_tokens / max(generate_s, 1e-9),
               "time/learner_tokens_per_s": learner_tokens / max(learn_s, 1e-9)}
    peak = peak_flops(device)
    if peak is not None:
        flops = (6 + 2 * reference) * parameters * learner_tokens
        metrics["time/learner_mfu"] = flops / max(learn_s, 1e-9) / peak
    if device.type == "cuda":
        metrics["time/peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        torch.cuda.reset_peak_memory_stats(device)
    return metrics
