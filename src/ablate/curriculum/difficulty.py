"""Difficulty levels of a prompt pool: the axis static, threshold and the logged mix share.

The task gives each prompt's value of `curriculum.difficulty.field` (`Task.difficulty`) and says how
the field makes levels (`Task.difficulty_fields`): `levels`, one level per value (Countdown's
`n_numbers`: 3 -> level 0, 4 -> level 1, paper 000's axis), or `quantiles`, `bins=b` equal-count bins
(Countdown's `hardness`, the solver's search effort; b=3: paper 001's easy / medium / hard thirds).
Level 0 is always the easiest.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import List, Sequence

import torch

KINDS = ("levels", "quantiles")
BIN_NAMES = {2: ("easy", "hard"), 3: ("easy", "medium", "hard")}


@dataclass
class Difficulty:
    """`curriculum.difficulty` of a sampler on the task's levels (one per value of the field)."""

    field: str = "n_numbers"


@dataclass
class BinnedDifficulty:
    """`curriculum.difficulty` of a sampler on quantile bins of the field (`Task.difficulty_fields`)."""

    field: str = "hardness"
    bins: int = 3


@dataclass
class LevelStage:
    """A stage of a static curriculum: the levels trained on until the fraction `until` of the run."""

    until: float = 1.0
    levels: List[int] = dataclass_field(default_factory=lambda: [0])


@dataclass(frozen=True)
class Levels:
    of: torch.Tensor          # [N] level index of every prompt
    names: tuple[str, ...]    # one per level, easiest first

    @property
    def count(self) -> int:
        return len(self.names)

    def members(self, levels: Sequence[int]) -> torch.Tensor:
        """Indices of the prompts whose level is in `levels`."""
        return torch.nonzero(torch.isin(self.of, torch.tensor(list(levels), dtype=torch.long))).flatten()

    def mix(self, indices: Sequence[int]) -> dict[str, float]:
        """Fraction of `indices` at each level, keyed by level name."""
        counts = torch.bincount(self.of[torch.as_tensor(list(indices), dtype=torch.long)], minlength=self.count)
        total = max(int(counts.sum()), 1)
        return {name: int(c) / total for name, c in zip(self.names, counts)}


def quantile_levels(values: torch.Tensor, bins: int) -> torch.Tensor:
    """Level of each value among `bins` equal-count bins (ties share the lower bin's edge)."""
    edges = torch.quantile(values.double(), torch.linspace(0, 1, bins + 1, dtype=torch.double)[1:-1])
    return torch.bucketize(values.double(), edges, right=True)


def difficulty_levels(values: Sequence[int], kind: str = "levels", bins: int = 3) -> Levels:
    """The levels of a pool whose prompts have difficulty `values` (a field of `kind`, see above)."""
    if kind == "levels":
        counts = torch.tensor(list(values), dtype=torch.long)
        distinct = sorted(set(counts.tolist()))
        of = torch.bucketize(counts, torch.tensor(distinct), right=False)
        return Levels(of, tuple(f"n{v}" for v in distinct))
    if kind == "quantiles":
        if bins < 2:
            raise ValueError(f"difficulty.bins={bins}: need at least 2 levels")
        effort = torch.tensor(list(values), dtype=torch.long)
        return Levels(quantile_levels(effort, bins), BIN_NAMES.get(bins, tuple(f"q{i}" for i in range(bins))))
    raise ValueError(f"difficulty kind {kind!r}: expected one of {KINDS}")


def task_levels(task, problems: Sequence, field: str, bins: int = 3) -> Levels:
    """The levels of a task's prompt pool by `curriculum.difficulty.field` (`Task.difficulty_fields`)."""
    if field not in task.difficulty_fields:
        raise ValueError(f"curriculum.difficulty.field={field!r}: expected one of {tuple(task.difficulty_fields)} "
                         f"(the difficulty fields of task={task.name})")
    return difficulty_levels(task.difficulty(problems, field), task.difficulty_fields[field], bins)
