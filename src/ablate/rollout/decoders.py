"""The forward passes of `rollout=hf`'s decoding loop: the prompt's (prefill), then one token per step.

Two ways, one interface (`prefill()`, `keep(indices)`, `step(tokens)`, each returning the live rows'
last-position logits in float32):
- `EagerDecoder` (the default): a KV cache written in place (`_GrowingLayer`); finished rows leave the
  batch and the cache, so late steps decode only the long tails.
- `CompiledDecoder` (`rollout.compile=true`): every step has the same shapes, so `torch.compile` builds it
  once and, on a GPU, replays it as a CUDA graph (mode reduce-overhead: one launch instead of hundreds of
  small kernels per token). Shapes stay fixed by a static cache of the chunk's whole length (rounded up to
  `LENGTH_BUCKET`, so prompts of other widths reuse the graph) with an attention mask over all of it, and by
  keeping finished rows in the batch (their outputs are dropped; the sampler only sees live rows). The
  prompt's forward stays eager: its width varies from chunk to chunk.
"""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache, DynamicLayer, StaticCache

# torch.compile's backend for the compiled step (tests swap in "eager" to check the logic without inductor)
COMPILE_BACKEND = "inductor"
# A compiled chunk's cache length is rounded up to this: prompt widths vary, and each new length compiles anew
LENGTH_BUCKET = 256


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name `model.forward` takes the KV cache by: transformers 5.24 renamed `past_key_values` to
    `cache` (the old name still works there, with a FutureWarning on every new user's console)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class _GrowingLayer(DynamicLayer):
    """One layer's KV cache with its storage allocated once per chunk, [rows, heads, max_len, dim]: each
    step writes its keys and values in place and attention reads narrow views of the filled part.
    `DynamicLayer` concatenates instead, copying the whole cache at every step; the views hold the same
    numbers, so attention gives the same results."""

    def __init__(self, max_len: int):
        super().__init__()
        self.max_len, self.length = max_len, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, heads = key_states.shape[:2]
        self._keys = key_states.new_empty((rows, heads, self.max_len, key_states.size(-1)))
        self._values = value_states.new_empty((rows, heads, self.max_len, value_states.size(-1)))
        self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.size(-2)
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        # Into fresh storage, filled part only: one pass (`index_select` writes into the narrow view),
        # and the old storage is freed, so memory shrinks with the batch as it did.
        if self.is_initialized:
            end = self.length
            for name in ("_keys", "_values"):
                old = getattr(self, name)
                new = old.new_empty((len(indices),) + old.shape[1:])
                torch.index_select(old[:, :, :end], 0, indices, out=new[:, :, :end])
                setattr(self, name, new)
            self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]


class EagerDecoder:
    """The default: the batch shrinks as rows finish (`keep`), and the cache with it."""

    def __init__(self, model, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                 max_new_tokens: int, extra: dict):
        self.model, self.cache_name, self.extra = model, cache_kwarg(model), extra
        self.ids, self.attention, self.positions = ids, attention, positions
        # Storage for the whole chunk at once, written in place (`_GrowingLayer`), not grown by a copy per step.
        width = ids.size(1)
        self.cache = Cache(layer_class_to_replicate=lambda: _GrowingLayer(width + max_new_tokens))

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=self.attention, position_ids=self.positions,
                          use_cache=True, **{self.cache_name: self.cache}, **self.extra).logits[:, -1].float()

    def prefill(self) -> torch.Tensor:
        return self._forward(self.ids)

    def keep(self, indices: torch.Tensor) -> None:
        self.cache.batch_select_indices(indices)
        self.attention, self.positions = self.attention[indices], self.positions[indices]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.attention = torch.cat([self.attention, torch.ones_like(self.attention[:, :1])], dim=-1)
        self.positions = self.positions[:, -1:] + 1
        return self._forward(tokens.unsqueeze(-1))


class CompiledSteps:
    """What a compiled decoder keeps across chunks (one per engine): the compiled one-token forward and a
    static cache per (rows, length), reset rather than reallocated, since a CUDA graph reads the cache at
    fixed addresses (a new cache would compile and record anew)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.cache_name = model, cache_kwarg(model)
        self.caches: dict[tuple[int, int], StaticCache] = {}
        self._compiled = None

    def cache(self, rows: int, length: int) -> StaticCache:
        cache = self.caches.get((rows, length))
        if cache is None:
            self.caches.clear()  # one at a time: a chunk of another shape frees the last one's memory
            cache = self.caches[(rows, length)] = StaticCache(config=self.model.config, max_cache_len=length)
        else:
            cache.reset()
        return cache

    def forward(self, ids, attention, positions, cache, extra) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                          **{self.cache_name: cache}, **extra).logits[:, -1]

    def step(self, ids, attention, positions, cache) -> torch.Tensor:
        if self._compiled is None:
            cuda = ids.device.type == "cuda"
            self._compiled = torch.compile(self.forward, dynamic=False, backend=COMPILE_BACKEND,
                                           mode="reduce-overhead" if cuda and COMPILE_BACKEND == "inductor" else None)
        if ids.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last replay's outputs were read: reuse its buffers
        return self._compiled(ids, attention, positions, cache, {})


class CompiledDecoder:
    """`rollout.compile=true`: fixed shapes at every step (module docstring)."""

    def __init__(self, steps: CompiledSteps, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                 max_new_tokens: int, extra: dict):
        rows, width = ids.shape
        length = -(-(width + max_new_tokens) // LENGTH_BUCKET) * LENGTH_BUCKET
        self.steps, self.ids, self.extra, self.filled = steps, ids, extra, width
        self.cache = steps.cache(rows, length)
        self.attention = attention.new_zeros((rows, length))
        self.attention[:, :width] = attention
        self.positions = positions
        self.live = torch.arange(rows, device=ids.device)
        self.tokens = ids.new_zeros((rows, 1))  # a finished row's input: any token, its output is dropped

    def prefill(self) -> torch.Tensor:
        return self.steps.forward(self.ids, self.attention, self.positions, self.cache, self.extra).float()

    def keep(self, indices: torch.Tensor) -> None:
        self.live = self.live[indices]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens[self.live, 0] = tokens
        self.attention[:, self.filled] = 1
        self.filled += 1
        self.positions = self.positions[:, -1:] + 1
        return self.steps.step(self.tokens, self.attention, self.positions, self.cache)[self.live].float()
