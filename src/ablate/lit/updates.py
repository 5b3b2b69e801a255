"""The optimizer updates one collected batch makes (PPO's epochs and mini-batches).

`stage.ppo_epochs` passes over the batch (verl's `actor.ppo_epochs`, TRL's `num_iterations`, GRPO's mu), each
cut into `stage.ppo_mini_batches` mini-batches of whole groups, one optimizer step each (verl: train batch /
`ppo_mini_batch_size`; DAPO's "16 gradient updates for each rollout step"). The behaviour log-probs stay those
of collection, so from the second update on the policy has moved and the importance ratio leaves 1: the ratio
clip (PPO, clip-higher, GSPO, CISPO) only binds there. 1 x 1 is one optimizer step per batch, the default.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch


def update_plan(groups: int, k: int, epochs: int, mini_batches: int) -> list[torch.Tensor]:
    """The sequence rows of each update, in order: `epochs` passes, each over `mini_batches` consecutive runs of
    whole groups (rows g*k .. g*k+k-1, prompt-major), as even as torch.tensor_split cuts them. A batch with fewer
    groups than mini-batches (a small batch, a replay buffer not yet full) gets one group per mini-batch.
    Consecutive, not shuffled, as verl splits: the same cut every epoch, and no random draw to checkpoint."""
    if groups < 1 or k < 1 or epochs < 1 or mini_batches < 1:
        raise ValueError(f"update_plan needs groups, k, epochs, mini_batches >= 1, got {groups}, {k}, {epochs}, "
                         f"{mini_batches}")
    rows = torch.arange(groups * k).view(groups, k)
    parts = [part.flatten() for part in torch.tensor_split(rows, min(mini_batches, groups))]
    return [part for _ in range(epochs) for part in parts]


def mean_metrics(updates: Sequence[Mapping[str, float]], maxima: Sequence[str] = ()) -> dict[str, float]:
    """One step's metrics from its updates': the mean of each over the updates (verl logs the mean over its
    mini-batches), the largest for the keys in `maxima`. One update's metrics pass through unchanged."""
    if len(updates) == 1:
        return dict(updates[0])
    return {key: max(u[key] for u in updates) if key in maxima else sum(u[key] for u in updates) / len(updates)
            for key in updates[0]}
