"""Overlong completions in RL (DAPO, Yu et al. 2025, section 3.4): the soft length penalty added to the reward
(`stage.overlong_buffer`, `stage.overlong_penalty`; the maths is `ablate.objectives.overlong_penalty`) and the
truncation mask (`stage.mask_truncated`: a completion cut at the token budget carries no loss, TRL's
`mask_truncated_completions`). A completion is truncated when it holds no eos (the engine stopped at
`sampling.max_new_tokens`), TRL's definition."""

from __future__ import annotations

from typing import Any

import torch

from ablate.objectives import overlong_penalty
from ablate.rollout import Rollouts


def truncated(rollouts: Rollouts, eos_id: int) -> torch.Tensor:
    """[N] True where completion i has no eos token."""
    return torch.tensor([eos_id not in ids for ids in rollouts.completion_ids], dtype=torch.bool)


def engaged(stage: Any) -> bool:
    """Whether the run shapes or masks overlong completions (then it logs their share)."""
    return stage.overlong_buffer > 0 or stage.mask_truncated


def shaped_rewards(rollouts: Rollouts, rewards: torch.Tensor, stage: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """Group rewards [prompts, k] plus each completion's soft overlong penalty (none with overlong_buffer=0),
    and the penalty's batch mean (`train/overlong_penalty_mean`)."""
    if stage.overlong_buffer <= 0:
        return rewards, {}
    lengths = torch.tensor([len(ids) for ids in rollouts.completion_ids])
    penalty = overlong_penalty(lengths, stage.sampling.max_new_tokens, stage.overlong_buffer,
                               stage.overlong_penalty).view_as(rewards)
    return rewards + penalty, {"train/overlong_penalty_mean": penalty.mean().item()}
