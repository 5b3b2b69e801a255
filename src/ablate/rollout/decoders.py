"""The forward passes of `rollout=hf`'s decoding loop: the prompt's (prefill), then one token per step.

Two ways, one interface (`prefill()`, `keep(indices)`, `step(tokens)`, each returning the live rows'
last-position logits in float32):
- `EagerDecoder` (the default): a KV cache written in place (`_GrowingLayer`); finished rows leave the
  batch and the cache, so late steps decode only the long tails.
- `CompiledDecoder` (`rollout.compile=true`): fixed shapes, so `torch.compile` builds a step once and, on a
  GPU, replays it as a CUDA graph (mode reduce-overhead: one launch instead of hundreds of small kernels per
  token). A static cache holds the chunk's whole length (rounded up to `LENGTH_BUCKET`, so prompts of other
  widths reuse the graphs); each step attends only its first `attended(filled)` slots, the filled part rounded
  up to `LENGTH_BUCKET` (`_BucketLayer`): one graph per such length (at most 5 at the papers' 1,280 slots),
  where attending the whole cache from the first step read 2.3x the filled part on average. Finished rows stay
  in the batch (their outputs are dropped; the sampler only sees live rows). The prompt's forward stays eager:
  its width varies from chunk to chunk. `CompiledSteps.release()` frees the cache after a rollout (below).
"""

from __future__ import annotations

import inspect

import torch
from torch._dynamo.callback import CallbackTrigger
from torch._dynamo.utils import counters
from transformers.cache_utils import Cache, DynamicLayer, StaticCache, StaticLayer

# torch.compile's backend for the compiled step (tests swap in "eager" to check the logic without inductor)
COMPILE_BACKEND = "inductor"
# A compiled chunk's cache length, and the part of it a step attends, are rounded up to this: each new length
# compiles anew (prompt widths vary from chunk to chunk; the filled part grows by one slot a step)
LENGTH_BUCKET = 256
# dynamo's recompile limit for the compiled step (its default, 8, is below row counts x attended lengths; past
# it dynamo runs the step eager without a word: `rollout/recompile_limit_hits` counts those calls)
MAX_GRAPHS = 32


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


def attended(filled: int, length: int) -> int:
    """The cache slots a compiled step attends when `filled` of them hold keys: `filled` rounded up to
    LENGTH_BUCKET, at most the cache's `length`."""
    return min(-(-filled // LENGTH_BUCKET) * LENGTH_BUCKET, length)


class _BucketLayer(StaticLayer):
    """A static cache layer (storage for `max_cache_len` slots at fixed addresses, written in place) that hands
    attention its first `attend` slots only and sizes the mask to them. `attend` is a plain int, so the compiled
    step specialises on it: one graph per attended length."""

    def __init__(self, max_cache_len: int, **kwargs):
        super().__init__(max_cache_len, **kwargs)
        self.attend = max_cache_len

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[:, :, :self.attend], values[:, :, :self.attend]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.attend, 0


def bucketed_cache(config, length: int) -> StaticCache:
    """transformers' StaticCache of `length` slots whose full-attention layers attend by bucket (`_BucketLayer`);
    other kinds of layer (sliding windows) stay as StaticCache builds them."""
    cache = StaticCache(config=config, max_cache_len=length)
    cache.layers = [_BucketLayer(length) if type(layer) is StaticLayer else layer for layer in cache.layers]
    return cache


class CompiledSteps:
    """What a compiled decoder keeps across the chunks of a rollout (one per engine): the compiled one-token
    forward and a static cache per (rows, length), reset rather than reallocated between chunks, since a CUDA
    graph reads the cache at the addresses it was recorded with.

    `release()` (the engine calls it at the end of each rollout, before the learner) drops the cache: at the
    papers' size it is 1,024 rows x 1,280 slots x 24 layers x (K, V) x 2 heads x 64 x 2 bytes (bf16 under
    autocast) = 15 GiB the learner could not use (the compiled step's peak was 59.1 GiB, eager's 36.5). The next rollout
    allocates a new one. No recompile follows (transformers marks the cache's tensors static and unguarded); where
    the new cache lands at other addresses, torch's CUDA-graph trees record the step again, a warm-up run and a
    capture per attended length (~3 decode steps each: ~0.1-0.2 s a rollout at the papers' size, against
    10-16 s of generation). Without empty_cache the allocator hands the same blocks back once the learner's
    own allocations repeat from step to step, so records should stop after the first steps:
    `rollout/cudagraph_records` counts them. torch 2.13 does not count these records toward its re-record limit
    (`cudagraph_unexpected_rerecord_limit`, 128 a graph); older versions did, and past it ran the step compiled
    without a graph. The CUDA-graph pool stays: it goes only with the graphs and the compiled code
    (`reset_cudagraph_trees` leaves the compiled step bound to a dead tree; `torch._dynamo.reset()` compiles
    everything again at every rollout), and it holds one step's working memory, not the cache."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.cache_name = model, cache_kwarg(model)
        self.caches: dict[tuple[int, int], StaticCache] = {}
        self._compiled, self._shapes = None, set()

    def cache(self, rows: int, length: int) -> StaticCache:
        cache = self.caches.get((rows, length))
        if cache is None:
            self.caches.clear()  # one at a time: a chunk of another shape frees the last one's memory
            cache = self.caches[(rows, length)] = bucketed_cache(self.model.config, length)
        else:
            cache.reset()
        return cache

    def release(self) -> None:
        """Drops the static cache (the class's docstring says why and what it costs)."""
        self.caches.clear()

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
        shape = (*attention.shape, cache.get_max_length())  # rows, attended length, cache length: one graph each
        if shape in self._shapes:
            return self._compiled(ids, attention, positions, cache, {})
        self._shapes.add(shape)
        with torch._dynamo.config.patch(recompile_limit=MAX_GRAPHS):  # only where dynamo may compile: 0.1-0.3 ms
            return self._compiled(ids, attention, positions, cache, {})


class CompiledDecoder:
    """`rollout.compile=true`: fixed shapes at every step, the cache attended by bucket (module docstring)."""

    def __init__(self, steps: CompiledSteps, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                 max_new_tokens: int, extra: dict):
        rows, width = ids.shape
        self.length = -(-(width + max_new_tokens) // LENGTH_BUCKET) * LENGTH_BUCKET
        self.steps, self.ids, self.extra, self.filled = steps, ids, extra, width
        self.cache = steps.cache(rows, self.length)
        self.attention = attention.new_zeros((rows, self.length))
        self.attention[:, :width] = attention
        self.positions = positions
        self.live = torch.arange(rows, device=ids.device)
        self.tokens = ids.new_zeros((rows, 1))  # a finished row's input: any token, its output is dropped

    def _attended(self) -> torch.Tensor:
        """Sets the cache's attended length for the filled part; the attention mask's view of that length."""
        slots = attended(self.filled, self.length)
        for layer in self.cache.layers:
            if isinstance(layer, _BucketLayer):
                layer.attend = slots
        return self.attention[:, :slots]

    def prefill(self) -> torch.Tensor:
        return self.steps.forward(self.ids, self._attended(), self.positions, self.cache, self.extra).float()

    def keep(self, indices: torch.Tensor) -> None:
        self.live = self.live[indices]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens[self.live, 0] = tokens
        self.attention[:, self.filled] = 1
        self.filled += 1
        self.positions = self.positions[:, -1:] + 1
        return self.steps.step(self.tokens, self._attended(), self.positions, self.cache)[self.live].float()


def _count_record(args) -> None:
    if args.callback_trigger is CallbackTrigger.CUDAGRAPH_RECORDING:
        _RECORDS[0] += 1


_RECORDS = [0]  # CUDA graphs recorded in this process (torch's callback at each recording)
torch._dynamo.callback_handler.register_start_callback(_count_record)


def compile_counters() -> dict[str, float]:
    """The process's torch.compile counters, logged each step with rollout.compile: `rollout/compiled_graphs`
    (graphs built so far: one per chunk shape and attended length), `rollout/recompile_limit_hits` (calls that
    dynamo sent back to eager after too many recompiles: each is a decode loop silently running uncompiled) and
    `rollout/cudagraph_records` (CUDA graphs recorded, a GPU's: growing at every step means the static cache
    moves between rollouts, CompiledSteps)."""
    hits = sum(n for reason, n in counters["unimplemented"].items() if "recompile limit" in reason.lower())
    return {"rollout/compiled_graphs": float(counters["stats"]["unique_graphs"]),
            "rollout/recompile_limit_hits": float(hits), "rollout/cudagraph_records": float(_RECORDS[0])}
