"""Rollout replay (paper 002): a FIFO buffer of groups with mixed rewards, so only a fraction of each
batch is freshly generated.

Each stored group keeps its sampled tokens and the log-probs of the policy that generated them, so
the learner's importance ratio for a replayed sample is taken against its own behaviour policy. Groups
whose k rewards are all equal carry no RLOO gradient and are never stored. Stored groups stay until
evicted (oldest first) and can be replayed more than once; which ones a batch reuses is a seeded draw.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch

from ablate.check_registry import CHECKS
from ablate.config import require
from ablate.config.schemas import config_schema
from ablate.rollout import Rollouts
from ablate.seeds import seed_of


@config_schema("replay", "replay_schema")
@dataclass
class ReplayConfig:
    """`replay:` (conf/config.yaml): whether a fraction of each batch is reused from the buffer, and its size."""

    enabled: bool = False
    fresh_fraction: float = 0.5
    capacity: int = 64


@dataclass
class ReplayGroup:
    index: int                # prompt index in the training pool
    rollouts: Rollouts        # k rollouts of that prompt
    rewards: list[float]      # their rewards
    verdicts: list[str]
    step: int                 # the step that generated them


class ReplayBuffer:
    def __init__(self, capacity: int, fresh_fraction: float, seed: int):
        self.groups: deque[ReplayGroup] = deque(maxlen=capacity)
        self.fresh_fraction = fresh_fraction
        self.generator = torch.Generator().manual_seed(seed_of("replay", seed))

    def __len__(self) -> int:
        return len(self.groups)

    def replay_count(self, batch: int) -> int:
        """Groups of a batch of `batch` prompts to take from the buffer: all but ceil(fresh_fraction * batch),
        as far as the buffer holds them."""
        return min(batch - math.ceil(self.fresh_fraction * batch), len(self.groups))

    def add(self, indices: Sequence[int], rollouts: Rollouts, rewards: torch.Tensor, verdicts: Sequence[str],
            step: int) -> int:
        """Store the non-degenerate groups of a fresh batch; returns how many were stored."""
        stored = 0
        for g, index in enumerate(indices):
            if rewards[g].max() > rewards[g].min():
                group_verdicts = list(verdicts[g * rollouts.k:(g + 1) * rollouts.k])
                self.groups.append(ReplayGroup(int(index), rollouts.groups([g]), rewards[g].tolist(), group_verdicts,
                                               step))
                stored += 1
        return stored

    def take(self, n: int) -> list[ReplayGroup]:
        order = torch.randperm(len(self.groups), generator=self.generator)[:n].tolist()
        return [self.groups[i] for i in order]

    def state_dict(self) -> dict[str, Any]:
        # Plain containers only, so the checkpoint loads without unpickling project classes.
        groups = [{**asdict(g), "rollouts": asdict(g.rollouts)} for g in self.groups]
        return {"groups": groups, "capacity": self.groups.maxlen, "generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.groups = deque((ReplayGroup(**{**g, "rollouts": Rollouts(**g["rollouts"])}) for g in state["groups"]),
                            maxlen=int(state["capacity"]))
        self.generator.set_state(state["generator"])


@CHECKS.register("replay", order=50)
def check_replay(cfg) -> None:
    """`replay=` config: ConfigError naming the key and the fix."""
    r = cfg.replay
    if r.enabled:
        require(cfg.stage.name == "rloo", f"replay.enabled=true reuses RL rollouts; it needs stage=rloo, not "
                                          f"stage={cfg.stage.name}")
        require(0 < float(r.fresh_fraction) <= 1, f"replay.fresh_fraction={r.fresh_fraction} must be in (0, 1]")
        require(int(r.capacity) >= 1, f"replay.capacity={r.capacity} must be >= 1")
