"""Grouped-query attention for a compiled decode step, registered with transformers under `FOLDED`.

transformers 5.24's `sdpa_attention_forward` folds a one-token query's grouped heads onto the key/value heads
([B, 14, 1, d] -> [B, 2, 7, d]) only when it is *not* being compiled; under `torch.compile` it expands K and V
from 2 to 14 heads over the whole cache at every step (`repeat_kv`): at 1,024 rows x 1,280 cache slots of the
0.5B shape that is ~242 GB of memory traffic a step, more than the whole step costs eager. This function folds
under compile too, and delegates everything else (prompts, eager steps) to transformers' own function, so an
eager forward gives exactly the numbers it gave before. The mask function is registered under the same name:
transformers builds no mask at all for an attention name its mask registry lacks, and left padding would leak.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.utils.import_utils import is_torchdynamo_compiling

FOLDED = "ablate_folded_sdpa"


def folded_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, H, 1, d], key/value [B, G, L, d] with H = G x r: the r query heads of each key/value head
    become r query rows of it, [B, G, r, d], so K and V are read once and never copied to H heads. The mask
    [B, 1, 1, L] (shared by the heads) broadcasts as it is. Returns [B, 1, H, d] as transformers' does."""
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or not is_torchdynamo_compiling():
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    folded = query.reshape(batch, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(FOLDED, folded_sdpa)
AttentionMaskInterface.register(FOLDED, sdpa_mask)


def use_folded(model: torch.nn.Module) -> None:
    """Switch a model that attends with transformers' `sdpa` to `FOLDED` (the same numbers outside compile).
    Other implementations (eager, flash attention) are left as they are. Not saved with the model: transformers
    keeps the implementation out of config.json."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(FOLDED)
