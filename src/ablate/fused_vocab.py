"""Token log-probs and entropies over a large vocabulary without an fp32 [tokens, vocabulary] tensor in memory.

At the 0.5B shape (151,936 columns) the learner's step was bound by memory traffic on such tensors: the fp32
logits, their logsumexp and softmax, and the autograd backward of each (63% of its non-matmul traffic, by the
review in docs/gpu.md). `fused_logprobs` computes, `chunk` positions at a time, the logits from the last hidden
states and the output head, keeps only each position's log-sum-exp and entropy, and in backward recomputes a
chunk's logits and writes the gradient of the logits in place from the analytic formula (the model for it is
verl's FusedLinearForPPOFunction):

    d log p(y) / d z = onehot(y) - p          d H / d z = -p * (log p + H)

so a chunk's backward holds two [chunk, V] fp32 buffers and never the autograd graph of a softmax. It equals
`ablate.objectives.chunked_logprobs` (the checkpointed reference implementation) to float rounding, gradients
included (tests/test_objectives.py). Matmuls run in the autocast dtype when autocast is on, as `head(hidden)`
would; the softmax arithmetic is fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tensor.dtype


class _FusedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
                entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = _compute_dtype(hidden)
        logps, lses, entropies = [], [], []
        for start in range(0, hidden.size(0), chunk):
            z = F.linear(hidden[start:start + chunk].to(dtype), weight.to(dtype)).float()  # [C, V]
            lse = torch.logsumexp(z, dim=-1)
            logps.append(z.gather(-1, targets[start:start + chunk, None]).squeeze(-1) - lse)
            lses.append(lse)
            if entropy:
                entropies.append(lse - (torch.softmax(z, dim=-1) * z).sum(-1))
        lse, logp = torch.cat(lses), torch.cat(logps)
        ent = torch.cat(entropies) if entropy else torch.zeros_like(lse)
        ctx.save_for_backward(hidden, weight, targets, lse, ent)
        ctx.chunk, ctx.dtype, ctx.entropy = chunk, dtype, entropy
        ctx.mark_non_differentiable(*(() if entropy else (ent,)))
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor | None, grad_ent: torch.Tensor | None):
        hidden, weight, targets, lse, ent = ctx.saved_tensors
        dtype, chunk = ctx.dtype, ctx.chunk
        w = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        for start in range(0, hidden.size(0), chunk):
            part = slice(start, start + chunk)
            h = hidden[part].to(dtype)
            logp_all = F.linear(h, w).float().sub_(lse[part, None])  # log p over the vocabulary, [C, V]
            p = logp_all.exp()
            if ctx.entropy and grad_ent is not None:  # -g_H * p * (log p + H), in the log-p buffer
                g = logp_all.add_(ent[part, None]).mul_(p).mul_(-grad_ent[part, None])
                g.sub_(p.mul_(grad_logp[part, None]))
            else:
                g = p.mul_(-grad_logp[part, None])
            rows = torch.arange(g.size(0), device=g.device)
            g[rows, targets[part]] += grad_logp[part]
            g = g.to(dtype)
            grad_hidden[part] = (g @ w).to(hidden.dtype)
            grad_weight += (g.t() @ h).float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def fused_logprobs(hidden: torch.Tensor, tokens: torch.Tensor, head: torch.nn.Module, chunk: int,
                   entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [N, T, H] (the last hidden states), tokens [N, T], `head` a bias-free linear output layer [V, H]:
    (log p(tokens) [N, T], entropies [N, T], or None with `entropy=False`: the frozen reference needs none)."""
    if getattr(head, "bias", None) is not None:
        raise ValueError("fused_logprobs: the output head has a bias; use ablate.objectives.chunked_logprobs")
    flat, targets = hidden.reshape(-1, hidden.size(-1)), tokens.reshape(-1)
    logp, ent = _FusedLogprobs.apply(flat, head.weight, targets, chunk, entropy)
    return logp.view(tokens.shape), ent.view(tokens.shape) if entropy else None
