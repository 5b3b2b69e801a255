"""Right padding, the one routine every batch of token sequences goes through (SFT batches, preference
pairs, RL rollouts, prompt embeddings): under causal attention a right pad changes no real token's logit."""

from __future__ import annotations

from typing import Sequence

import torch


def right_pad(rows: Sequence[Sequence[float]], value: float, dtype: torch.dtype = torch.long,
              width: int | None = None) -> torch.Tensor:
    """[len(rows), width]: each row from column 0, `value` after its end (width: the longest row's)."""
    width = max(map(len, rows)) if width is None else width
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, :len(row)] = torch.tensor(row, dtype=dtype)
    return out


def attention_mask(rows: Sequence[Sequence[int]], width: int | None = None) -> torch.Tensor:
    """1 over each row's tokens, 0 over its right padding: [len(rows), width] (long)."""
    return right_pad([[1] * len(row) for row in rows], 0, width=width)
