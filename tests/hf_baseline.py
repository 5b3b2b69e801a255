"""A frozen copy of `HFEngine._sample_chunk` as it was before the decoding loop was made cheaper
(commit 2d7d025): the reference that tests/test_rollout.py holds the engine's draws, behaviour log-probs
and tool masks to, bit for bit, and the baseline bench/bench_decode.py times the engine against.
`filter_logits` is frozen with it. Do not edit: it is the old loop, not a second implementation to maintain."""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine, cache_kwarg


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


class BaselineHFEngine(HFEngine):
    """`HFEngine` with the old per-chunk loop (everything else, `generate` included, shared)."""

    @torch.no_grad()
    def _sample_chunk(self, prompts: Sequence[list[int]], params: SamplingParams, generator: torch.Generator,
                      tool_on: Sequence[bool]):
        model, pad, eos = self.model, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        device = next(model.parameters()).device
        n, width = len(prompts), max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        # Finished sequences leave the batch and the KV cache, so late steps decode only the long
        # tails; `rows` maps the batch's rows to the chunk's sequences. Left after a finish: pad.
        rows = torch.arange(n, device=device)
        tokens = torch.full((n, params.max_new_tokens), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros((n, params.max_new_tokens), device=device)
        forced_steps = torch.zeros((n, params.max_new_tokens), dtype=torch.bool, device=device)
        generated = [[] for _ in prompts]  # per sequence, for the tool to read its call
        queues: list[list[int]] = [[] for _ in prompts]  # tool output still to splice in
        calls = [0] * n
        tool = self.tool
        sessions = [tool.session(p) if tool is not None and on else None for p, on in zip(prompts, tool_on)]
        step_input, step_positions, steps = ids, positions, 0
        for step in range(params.max_new_tokens):
            steps = step + 1
            logits = model(input_ids=step_input, attention_mask=attention, position_ids=step_positions,
                           use_cache=True, **{cache_kwarg(model): cache}).logits[:, -1].float()
            scaled = logits / params.temperature
            logp = torch.log_softmax(scaled, dim=-1)
            probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), dim=-1)
            token = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(device)
            forced = torch.zeros_like(token, dtype=torch.bool)
            if tool is not None:  # tool output waiting to be spliced in replaces the sample
                live = rows.tolist()
                forced = torch.tensor([bool(queues[i]) for i in live], device=device)
            if bool(forced.any()):
                token = torch.where(forced, torch.tensor([queues[i][0] if queues[i] else 0 for i in live],
                                                         device=device), token)
                for i in live:
                    del queues[i][:1]
            tokens[rows, step] = token
            forced_steps[rows, step] = forced
            logprobs[rows, step] = torch.where(forced, 0.0, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1))
            if tool is not None:
                for row, (i, t) in enumerate(zip(live, token.tolist())):
                    generated[i].append(t)
                    if sessions[i] is not None and t in tool.stop_ids and not forced[row] and calls[i] < tool.max_calls:
                        reply = sessions[i].reply(generated[i])
                        if reply:
                            queues[i] = list(reply)
                            calls[i] += 1
            running = (token != eos) & (token != pad)
            if not bool(running.any()):
                break
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
            if not bool(running.all()):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows, token, attention, step_positions = rows[keep], token[keep], attention[keep], step_positions[keep]
            step_positions = step_positions[:, -1:] + 1
            step_input = token.unsqueeze(-1)
        return (tokens[:, :steps].tolist(), logprobs[:, :steps].tolist(), forced_steps[:, :steps].tolist(), calls)
