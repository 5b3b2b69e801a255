"""How the RLOO learner cuts a batch: micro-batches by rows or padded tokens, each micro-batch's share of
the batch's sums, the update's running metric totals, and the reference model's dtype. Pure functions."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ablate.objectives import CLIPPED_LOSSES, token_level


def reference_dtype(name: str) -> torch.dtype:
    """`stage.reference_dtype`: float32, bfloat16, or auto = bfloat16 where the hardware multiplies it natively
    (a CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX), else float32. In bf16 the reference's forward
    takes ~2.3x less time on such a CPU and the KL estimate moves by ~0.1% (bench/bench_reference_dtype.py)."""
    if name != "auto":
        return getattr(torch, name)
    if torch.cuda.is_available():
        native = torch.cuda.is_bf16_supported()
    else:
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return torch.bfloat16 if native else torch.float32


@dataclasses.dataclass
class Shares:
    loss: float      # of the loss (and the loss, pg_loss, kl, entropy metrics)
    ratio: float     # of the importance-weight mean and clip fraction
    fraction: float  # of the masked and dual-clipped fractions


def micro_batch_shares(rows: int, n: int, tokens: torch.Tensor, tokens_total: torch.Tensor, aggregation: str,
                       is_level: str) -> Shares:
    """A micro-batch's weights in the batch's sums. Its loss is scaled by its share of what the batch's loss
    averages over (tokens for token_mean, sequences otherwise), so the sum over micro-batches is the whole
    batch's loss however it is cut. The importance-weight statistics are means over sequences, or at the
    token level over what the loss averages; the masked / dual-clipped fractions over sequences, or tokens."""
    sequences = rows / n
    loss = float(tokens / tokens_total) if aggregation == "token_mean" else sequences
    if not token_level(is_level):
        return Shares(loss, sequences, sequences)
    return Shares(loss, loss, float(tokens / tokens_total))


# Above this vocabulary the learner computes log-probs and entropies from the hidden states in chunks of
# LOGIT_CHUNK positions (`chunked_logprobs`); the tiny model keeps the whole-logits path (goldens).
CHUNKED_VOCAB = 4096
LOGIT_CHUNK = 2048


def micro_batches(order: torch.Tensor, lengths: torch.Tensor, size: int, token_budget: int | None) -> list[torch.Tensor]:
    """`order` (sequence indices, longest first) cut into micro-batches: `size` sequences each, or with
    `token_budget` as many as fit in that many padded tokens (rows x the micro-batch's longest, at least
    one row), so short batches fill the device and long ones do not run out of memory."""
    if not token_budget:
        return [order[start:start + size] for start in range(0, len(order), size)]
    parts, start = [], 0
    while start < len(order):
        rows = max(1, token_budget // max(int(lengths[order[start]]), 1))  # the first row is the longest
        parts.append(order[start:start + rows])
        start += rows
    return parts


def learner_totals(stage: Any, kl: bool) -> tuple[dict[str, float], dict[str, str]]:
    """An update's running sums of its `train/*` metrics, zero, and the optional ones (the policy loss's
    diagnostic key -> the metric's name), logged only when switched on so a default run's metrics.csv keeps
    its columns."""
    totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "is_weight_mean": 0.0, "is_clip_frac": 0.0}
    if not kl:
        del totals["kl"]
    optional = {"mask_fraction": "is_mask_frac"} if stage.is_mode == "mask" else {}
    if stage.dual_clip is not None:
        optional["dual_clip_fraction"] = "is_dual_clip_frac"
    if stage.is_level in CLIPPED_LOSSES:
        optional.update(clip_low_fraction="is_clip_frac_low", clip_high_fraction="is_clip_frac_high")
    totals.update({name: 0.0 for name in optional.values()})
    return totals, optional
