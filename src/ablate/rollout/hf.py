"""`rollout=hf`: sampling with the policy itself (transformers model, KV cache), on CPU or GPU.

A hand-written decoding loop instead of `generate` because RL needs, per token, the behaviour
log-prob of what was sampled, and the tool loop needs to splice tool output into individual
sequences mid-batch; both are a few lines here. Weights are shared with the learner, so `sync`
has nothing to copy. Any `ablate.rollout.tools.Tool` works (calculator, solver oracle): when a
sequence samples one of the tool's stop tokens, its session is asked for a reply, whose tokens are
then forced one per step (behaviour log-prob 0, tool mask set); a forced eos ends the sequence.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import Rollouts, SamplingParams
from .attention import use_folded
from .decoders import (CompiledDecoder, CompiledSteps, EagerDecoder, cache_kwarg,  # noqa: F401 (cache_kwarg: tests, benches)
                       compile_counters)
from .tools import Tool


# Above this vocabulary size (the 0.5B model's is 151,936), or on a GPU, a decode step samples on the logits'
# own device by inverse CDF: torch.multinomial on the host copied the (rows x vocab) matrix to the CPU and
# cost 0.85 s a step for 256 rows there. The tiny model's 108-token vocabulary on the CPU keeps
# torch.multinomial, so its numbers (tests/goldens) stay bit-identical.
LARGE_VOCAB = 4096


def sample_on_device(scaled: torch.Tensor, top_k: int, top_p: float,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of `scaled` (rows x vocab, logits / temperature) and its behaviour log-prob under
    the tempered, unfiltered distribution (what `log_softmax(scaled)` gives). `scaled` is overwritten: a
    fresh rows x 151,936 matrix costs a CPU more than the whole draw (page faults on every allocation).

    Top-k keeps the k largest (`topk`, no full sort) and the nucleus is taken over those k; a full sort
    only for top-p alone. The draw is one uniform per row from `generator` (on `scaled`'s device)
    against the kept tokens' cumulative weights (`inverse_cdf`): exact sampling, like torch.multinomial."""
    top = scaled.amax(dim=-1, keepdim=True)
    if top_k and top_k < scaled.size(-1):
        values, index = torch.topk(scaled, top_k, dim=-1)  # sorted, largest first
    elif top_p < 1.0:
        values, index = torch.sort(scaled, descending=True, dim=-1)
    else:
        values, index = None, None
    full = scaled.sub_(top).exp_()  # the whole row's unnormalised probabilities, in place
    weights = full if values is None else values.sub_(top).exp_()
    if top_p < 1.0:  # the nucleus: drop a token once the mass before it reaches top_p; the top token stays
        mass = weights.cumsum(-1)
        weights = weights.masked_fill(mass - weights >= top_p * mass[:, -1:], 0.0)
    u = torch.rand((scaled.size(0), 1), generator=generator, device=scaled.device)
    choice, total = inverse_cdf(weights, u)
    norm = total if values is None else full.sum(-1, keepdim=True)  # unfiltered: the draw's total is the norm
    token = choice if index is None else index.gather(-1, choice)
    return token.squeeze(-1), (torch.log(full.gather(-1, token)) - torch.log(norm)).squeeze(-1)


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows x 1 indices drawn from `weights` (rows x m, non-negative) by `u` (rows x 1, uniform on [0, 1)),
    and each row's total weight (rows x 1).

    Two levels where m has a divisor in 256..4096 (151,936 = 64 x 2,374): block totals pick a block, and only
    that block is scanned, instead of a cumulative sum over the whole row (the slow part on a CPU)."""
    m = weights.size(-1)
    block = next((b for b in range(4096, 255, -1) if m % b == 0), m) if m > 4096 else m
    blocks = weights.view(weights.size(0), m // block, block)
    totals = blocks.sum(-1).cumsum(-1)  # rows x blocks
    target = u * totals[:, -1:]
    # right=True: the first place whose running total exceeds the target, never a weight of zero
    which = torch.searchsorted(totals, target, right=True).clamp_(max=totals.size(-1) - 1)
    before = torch.where(which > 0, totals.gather(-1, (which - 1).clamp(min=0)), torch.zeros_like(target))
    inside = blocks.gather(1, which.unsqueeze(-1).expand(-1, 1, block)).squeeze(1).cumsum(-1)
    offset = torch.searchsorted(inside, target - before, right=True).clamp_(max=block - 1)
    return which * block + offset, totals[:, -1:]


def device_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """A generator on `device` seeded by one draw from the run's (CPU) `generator`: the same run seed gives
    the same stream on the same GPU, and a resumed run continues it (the CPU generator is checkpointed)."""
    if device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) what top-k and nucleus (top-p) sampling exclude; the top token always stays."""
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        remove = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


# On a GPU, a decode loop without a tool asks the host whether rows finished every END_CHECK steps rather than
# at every step: each such question is a host sync that stalls the queue of launched kernels. Rows finished in
# between decode a few tokens more, cut afterwards at their first eos. The CPU asks at every step (exact goldens).
END_CHECK = 8


class HFEngine:
    """`dtype`: None samples with the learner's own weights (under its autocast, which re-casts every weight at
    every decode step); "bfloat16" / "float16" samples with a copy of the policy in that dtype, refreshed in
    place at each `sync` (its addresses stay, so a compiled step's CUDA graph stays valid)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 256,
                 tool: Tool | None = None, compile: bool = False, dtype: str | None = None):
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.tool = tool
        self.dtype = getattr(torch, dtype) if dtype else None
        self.compile = compile
        self.model = self.sampler = self.compiled = None
        self.sync(model)

    def sync(self, model: torch.nn.Module) -> None:
        """The learner's weights after an optimizer step: shared (dtype None), or copied in place into the sampling
        copy. A new model, or one moved to another device, drops the copy and the compiled step: `_sampling` builds
        them when next needed, where the model then is (an engine is built before Lightning moves the policy)."""
        if model is not self.model:
            self.model, self.compiled = model, None
            self.sampler = model if self.dtype is None else None
        elif self.sampler is not None and self.sampler is not model:
            if _device(self.sampler) != _device(model):
                self.sampler = self.compiled = None
            else:
                with torch.no_grad():
                    for mine, theirs in zip(self.sampler.parameters(), model.parameters()):
                        mine.copy_(theirs)

    def _sampling(self) -> torch.nn.Module:
        """The model that samples, the bf16 copy and the compiled step built on first use (rollout.dtype,
        rollout.compile: fixed-shape decode steps with folded grouped-query heads, ablate.rollout.decoders)."""
        if self.sampler is None:
            self.sampler = _cast_copy(self.model, self.dtype)
        if self.compile and self.compiled is None:
            use_folded(self.sampler)
            self.compiled = CompiledSteps(self.sampler)
        return self.sampler

    @torch.no_grad()
    def _sample_chunk(self, prompts: Sequence[list[int]], params: SamplingParams, generator: torch.Generator,
                      tool_on: Sequence[bool]):
        model, pad, eos = self.sampler, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        device = _device(model)
        n, width = len(prompts), max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        # Finished sequences leave the batch (and, eager, the KV cache), so late steps decode only the long
        # tails; `rows` maps the batch's rows to the chunk's sequences. Left after a finish: pad.
        rows = torch.arange(n, device=device)
        tokens = torch.full((n, params.max_new_tokens), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros((n, params.max_new_tokens), device=device)
        forced_steps = torch.zeros((n, params.max_new_tokens), dtype=torch.bool, device=device)
        splice = _Splicer(self.tool, prompts, tool_on) if self.tool is not None else None
        on_device = device.type != "cpu" or getattr(getattr(model, "config", None), "vocab_size", 0) > LARGE_VOCAB
        # on the device path the prompt's forward computes the last position's logits only (not width x vocab)
        last_only = {"logits_to_keep": 1} if on_device else {}
        draw = device_generator(generator, device) if on_device else generator
        check = _end_check(device, splice)
        decoder = (CompiledDecoder(self.compiled, ids, attention, positions, params.max_new_tokens, last_only)
                   if self.compiled is not None else
                   EagerDecoder(model, ids, attention, positions, params.max_new_tokens, last_only))
        logits, done, steps = decoder.prefill(), torch.zeros(n, dtype=torch.bool, device=device), 0
        for step in range(params.max_new_tokens):
            steps = step + 1
            scaled = logits / params.temperature
            if on_device:
                token, token_logp = sample_on_device(scaled, params.top_k, params.top_p, draw)
            else:
                logp = torch.log_softmax(scaled, dim=-1)
                probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), dim=-1)
                token = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(device)
                token_logp = logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            forced = splice.force(rows, token) if splice is not None else torch.zeros_like(token, dtype=torch.bool)
            tokens[rows, step] = token
            forced_steps[rows, step] = forced
            logprobs[rows, step] = torch.where(forced, 0.0, token_logp)
            if splice is not None:
                splice.read(rows, token, forced)
            done[rows] |= (token == eos) | (token == pad)
            if steps == params.max_new_tokens or (steps % check == 0 and bool(done[rows].all())):
                break
            if steps % check == 0 and bool(done[rows].any()):
                keep = (~done[rows]).nonzero().squeeze(-1)
                decoder.keep(keep)
                rows, token = rows[keep], token[keep]
            logits = decoder.step(token)
        return (tokens[:, :steps].tolist(), logprobs[:, :steps].tolist(), forced_steps[:, :steps].tolist(),
                splice.calls if splice is not None else [0] * n)

    def generate(self, prompt_ids: Sequence[list[int]], k: int, params: SamplingParams,
                 generator: torch.Generator, tool_available: Sequence[bool] | None = None) -> Rollouts:
        """k samples per prompt; `tool_available[i]` (per sampled sequence, prompt-major) says whether
        the tool answers in sequence i (default: whenever the engine has one)."""
        sampler = self._sampling()
        was_training = sampler.training
        sampler.eval()
        expanded = [list(p) for p in prompt_ids for _ in range(k)]
        tool_on = list(tool_available) if tool_available is not None else [True] * len(expanded)
        completions, behaviour, tool_mask, calls = [], [], [], []
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for start in range(0, len(expanded), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            chunk_tokens, chunk_logprobs, chunk_forced, chunk_calls = self._sample_chunk(
                expanded[chunk], params, generator, tool_on[chunk])
            calls += chunk_calls
            for row, row_logprobs, row_forced in zip(chunk_tokens, chunk_logprobs, chunk_forced):
                # Up to and including the first eos (a tool's too); a sampled pad ends the sequence
                # (excluded). A forced pad is tool output, as when the tokenizer pads with eos.
                length = next((j + (t == eos) for j, (t, f) in enumerate(zip(row, row_forced))
                               if t == eos or (t == pad and not f)), len(row))
                completions.append(row[:length])
                behaviour.append(row_logprobs[:length])
                tool_mask.append(row_forced[:length])
        if was_training:
            sampler.train()
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        stats = {"tool/calls_per_rollout": sum(calls) / len(calls)} if self.tool is not None else {}
        if self.compiled is not None:
            self.compiled.release()  # the static cache goes before the learner runs (CompiledSteps)
            stats.update(compile_counters())
        return Rollouts(prompt_ids=expanded, completion_ids=completions, behaviour_logprobs=behaviour,
                        tool_mask=tool_mask, texts=texts, k=k, tool_calls=calls, stats=stats)


def _end_check(device: torch.device, splice: "_Splicer | None") -> int:
    """Steps between questions to the host whether rows ended: END_CHECK on a GPU without a tool, else every step."""
    return END_CHECK if device.type == "cuda" and splice is None else 1


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _cast_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A frozen copy of `model` with its parameters in `dtype`; buffers (the rotary frequencies) stay as they are."""
    sampler = copy.deepcopy(model).eval().requires_grad_(False)
    for parameter in sampler.parameters():  # tied weights are one parameter: cast once
        parameter.data = parameter.data.to(dtype)
    return sampler


class _Splicer:
    """The tool's side of a chunk's decode loop: output waiting to be spliced in replaces the sample (forced,
    one token a step), and a sequence that samples one of the tool's stop tokens gets its session's reply."""

    def __init__(self, tool: Tool, prompts: Sequence[list[int]], tool_on: Sequence[bool]):
        self.tool = tool
        self.sessions = [tool.session(p) if on else None for p, on in zip(prompts, tool_on)]
        self.generated: list[list[int]] = [[] for _ in prompts]  # per sequence, for the tool to read its call
        self.queues: list[list[int]] = [[] for _ in prompts]  # tool output still to splice in
        self.calls = [0] * len(prompts)

    def force(self, rows: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """Replaces (in place) the sampled `token` of each live row with tool output waiting for it; which were."""
        live = rows.tolist()
        forced = torch.tensor([bool(self.queues[i]) for i in live], device=token.device)
        if any(self.queues[i] for i in live):
            token.copy_(torch.where(forced, torch.tensor([self.queues[i][0] if self.queues[i] else 0 for i in live],
                                                         device=token.device), token))
            for i in live:
                del self.queues[i][:1]
        return forced

    def read(self, rows: torch.Tensor, token: torch.Tensor, forced: torch.Tensor) -> None:
        for row, (i, t) in enumerate(zip(rows.tolist(), token.tolist())):
            self.generated[i].append(t)
            session = self.sessions[i]
            if session is not None and t in self.tool.stop_ids and not forced[row] and self.calls[i] < self.tool.max_calls:
                reply = session.reply(self.generated[i])
                if reply:
                    self.queues[i] = list(reply)
                    self.calls[i] += 1
