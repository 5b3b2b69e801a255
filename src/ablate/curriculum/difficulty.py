"""Difficulty levels of a prompt pool: the axis static, threshold and the logged mix share.

`field=n_numbers`: one level per operand count (3 -> level 0, 4 -> level 1: paper 000's axis).
`field=hardness` with `bins=b`: b quantile bins of the solver's search effort over the pool
(b=3: paper 001's easy / medium / hard thirds). Level 0 is always the easiest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ablate.tasks.countdown import Problem
from ablate.tasks.countdown.solver import search_hardness

FIELDS = ("n_numbers", "hardness")
BIN_NAMES = {2: ("easy", "hard"), 3: ("easy", "medium", "hard")}


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


def difficulty_levels(problems: Sequence[Problem], field: str = "n_numbers", bins: int = 3) -> Levels:
    if field == "n_numbers":
        counts = torch.tensor([p.n_numbers for p in problems], dtype=torch.long)
        values = sorted(set(counts.tolist()))
        of = torch.bucketize(counts, torch.tensor(values), right=False)
        return Levels(of, tuple(f"n{v}" for v in values))
    if field == "hardness":
        if bins < 2:
            raise ValueError(f"difficulty.bins={bins}: need at least 2 levels")
        hardness = torch.tensor([p.hardness if p.hardness is not None else search_hardness(p.numbers, p.target)
                                 for p in problems], dtype=torch.long)
        return Levels(quantile_levels(hardness, bins), BIN_NAMES.get(bins, tuple(f"q{i}" for i in range(bins))))
    raise ValueError(f"difficulty.field={field!r}: expected one of {FIELDS}")
