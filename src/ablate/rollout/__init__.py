"""Rollout engines: sample k completions per prompt and return token ids, behaviour log-probs and
masks. The learner never imports an engine; it receives one (`ablate.rollout.engines.build_engine`,
where each engine is registered under its `rollout=` name with its builder and its config check)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch


# conf/rollout/vllm.yaml keys passed to vllm.LLM as they are
VLLM_LLM_KEYS = ("dtype", "enforce_eager", "gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len",
                 "enable_prefix_caching")


@dataclass
class Rollouts:
    """k completions for each of P prompts, prompt-major (sequence i belongs to prompt i // k).

    `completion_ids[i]` holds every generated token (eos included, padding excluded);
    `behaviour_logprobs[i]` the sampling policy's log-prob of each (0.0 for tool-written tokens);
    `tool_mask[i]` marks tokens the tool wrote, which never carry loss.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    behaviour_logprobs: list[list[float]]
    tool_mask: list[list[bool]]
    texts: list[str]
    k: int
    tool_calls: list[int] = field(default_factory=list)  # tool answers spliced into each sequence
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def n_prompts(self) -> int:
        return len(self.completion_ids) // self.k

    def groups(self, which: Sequence[int]) -> "Rollouts":
        """The rollouts of the prompts at positions `which`, in that order."""
        rows = [g * self.k + j for g in which for j in range(self.k)]
        pick = lambda values: [values[r] for r in rows]  # noqa: E731
        return Rollouts(pick(self.prompt_ids), pick(self.completion_ids), pick(self.behaviour_logprobs),
                        pick(self.tool_mask), pick(self.texts), self.k,
                        pick(self.tool_calls) if self.tool_calls else [])

    @staticmethod
    def concat(parts: Sequence["Rollouts"]) -> "Rollouts":
        """Prompt-major concatenation (same k); `stats` are the first part's."""
        k = parts[0].k
        if any(p.k != k for p in parts):
            raise ValueError(f"cannot concatenate rollouts with different k: {[p.k for p in parts]}")
        join = lambda name: [x for p in parts for x in getattr(p, name)]  # noqa: E731
        calls = join("tool_calls") if all(p.tool_calls or not p.completion_ids for p in parts) else []
        return Rollouts(join("prompt_ids"), join("completion_ids"), join("behaviour_logprobs"), join("tool_mask"),
                        join("texts"), k, calls, dict(parts[0].stats))


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    max_new_tokens: int = 64


class RolloutEngine(Protocol):
    def generate(self, prompt_ids: Sequence[list[int]], k: int, params: SamplingParams,
                 generator: torch.Generator, tool_available: Sequence[bool] | None = None) -> Rollouts:
        """k samples per prompt; `tool_available[i]` (per sampled sequence, prompt-major): whether the
        engine's tool (`ablate.rollout.tools`) answers in sequence i. RLOO passes it with k=1 and one
        prompt per rollout (the preamble can follow each rollout's draw)."""

    def sync(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the learner's current weights (after each optimizer step)."""
