"""What collection (ablate.lit.collector) hands the RL learner (ablate.lit.rloo): freshly rolled-out groups,
the step's batch, and the helpers that shape them (padding to next-token targets, dynamic sampling's filter,
phase timing). Pure data and functions: no model, no optimizer."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Sequence

import torch

from ablate.padding import attention_mask, right_pad
from ablate.rollout import Rollouts
from ablate.rundir.metrics_csv import TIME
from ablate.tasks import CORRECT


def pad_rollouts(rollouts: Rollouts, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded prompt+completion ids with masks aligned to next-token targets [N, L-1]."""
    sequences = [p + c for p, c in zip(rollouts.prompt_ids, rollouts.completion_ids)]
    # Position t predicts token t+1: [N, L-1] targets, a completion's from position len(prompt) - 1 on.
    targets = max(map(len, sequences)) - 1
    before = [[0.0] * (len(prompt) - 1) for prompt in rollouts.prompt_ids]
    ids, attention = right_pad(sequences, pad_id), attention_mask(sequences)
    loss_mask = right_pad([b + [0.0 if tool else 1.0 for tool in rollouts.tool_mask[i]] for i, b in enumerate(before)],
                          0.0, torch.float32, targets)
    behaviour = right_pad([b + list(rollouts.behaviour_logprobs[i]) for i, b in enumerate(before)], 0.0,
                          torch.float32, targets)
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask, "behaviour": behaviour}


def informative_groups(correct: torch.Tensor) -> torch.Tensor:
    """Dynamic sampling's filter (DAPO; verl `algorithm.filter_groups`): [prompts, k] booleans (sample
    judged correct) -> [prompts] True where the group's samples do not all share one outcome. It reads
    the verdict, never the shaped reward: a group of wrong answers with format credit on some samples
    has unequal rewards but no success signal (NeMo-RL #2431), and is dropped."""
    return correct.any(dim=-1) & ~correct.all(dim=-1)


@dataclasses.dataclass
class FreshGroups:
    """Freshly rolled-out groups of one step, prompt-major: what the learner trains on (`kept`) or
    everything generated (`seen`, which the step's reward and verdict metrics describe)."""

    indices: list[int]
    problems: list[Any]
    rollouts: Rollouts
    rewards: torch.Tensor  # [prompts, k]
    verdicts: list[str]
    available: list[bool]

    def informative(self) -> torch.Tensor:
        """[prompts] True where the group's samples do not all share one outcome (`informative_groups`)."""
        return informative_groups(torch.tensor([v == CORRECT for v in self.verdicts]).view(-1, self.rollouts.k))

    def groups(self, which: Sequence[int]) -> "FreshGroups":
        k = self.rollouts.k
        rows = [g * k + j for g in which for j in range(k)]
        return FreshGroups([self.indices[g] for g in which], [self.problems[g] for g in which],
                           self.rollouts.groups(which), self.rewards[list(which)].reshape(len(which), k),
                           [self.verdicts[r] for r in rows], [self.available[r] for r in rows])

    @staticmethod
    def concat(parts: Sequence["FreshGroups"]) -> "FreshGroups":
        if len(parts) == 1:
            return parts[0]
        return FreshGroups([i for p in parts for i in p.indices], [q for p in parts for q in p.problems],
                           Rollouts.concat([p.rollouts for p in parts]), torch.cat([p.rewards for p in parts]),
                           [v for p in parts for v in p.verdicts], [a for p in parts for a in p.available])


class PhaseTimer:
    """Wall seconds of each phase of one step, summed over its entries: `with timer("generate"): ...`.
    Phases nest (learn holds the forwards, backward and optimizer), so they are not a partition."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.monotonic() - start

    def metrics(self) -> dict[str, float]:
        return {f"{TIME}{phase}_s": seconds for phase, seconds in self.seconds.items()}


@dataclasses.dataclass
class Collected:
    """What `Collector.collect` hands the learner: the groups freshly generated (`seen`, which the reward,
    verdict and tool metrics describe), the batch to learn from (kept fresh groups plus replayed ones), its
    group rewards [prompts, k], and the metrics that describe the collection (`Collector.describe`)."""

    seen: FreshGroups
    rollouts: Rollouts
    rewards: torch.Tensor
    metrics: dict[str, float]
