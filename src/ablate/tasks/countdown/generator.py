"""Seeded generation of solvable Countdown problems."""

from __future__ import annotations

import random
from typing import Sequence

from ablate.console import tracked

from .problem import Problem
from .solver import reachable_integers

MIN_COUNT, MAX_COUNT = 2, 6
MAX_ATTEMPTS = 1000


def check_generator_args(counts: Sequence[int], min_number: int, max_number: int,
                         min_target: int, max_target: int) -> None:
    if not counts:
        raise ValueError("counts is empty; give operand counts such as [3, 4]")
    for count in counts:
        if not isinstance(count, int) or not MIN_COUNT <= count <= MAX_COUNT:
            raise ValueError(f"operand count {count!r} is outside {MIN_COUNT}..{MAX_COUNT}")
    if not 0 <= min_number <= max_number:
        raise ValueError(f"number range {min_number}..{max_number} is empty or negative")
    if not min_target <= max_target:
        raise ValueError(f"target range {min_target}..{max_target} is empty")


def generate(n: int, seed: int = 0, counts: Sequence[int] = (3, 4), min_number: int = 1, max_number: int = 99,
             min_target: int = 1, max_target: int = 99, labels: bool = True, progress: bool = False) -> list[Problem]:
    """`n` problems, each solvable using every number exactly once (the verifier's rule).

    Defaults follow TinyZero's `countdown_tasks_3to4`: 3 or 4 numbers drawn uniformly from
    1..99 (repeats allowed), target in 1..99. The operand count is drawn uniformly from
    `counts`; the target uniformly from the integers in range that the numbers can reach.
    Same arguments, same problems.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    counts = list(counts)
    check_generator_args(counts, min_number, max_number, min_target, max_target)
    rng = random.Random(seed)
    problems: list[Problem] = []
    for _ in tracked(range(n), desc="generating problems", total=n, unit="problems", enabled=progress):
        for _attempt in range(MAX_ATTEMPTS):
            count = rng.choice(counts)
            numbers = tuple(rng.randint(min_number, max_number) for _ in range(count))
            targets = reachable_integers(numbers, min_target, max_target)
            if targets:
                problem = Problem(numbers, rng.choice(targets))
                problems.append(problem.labelled() if labels else problem)
                break
        else:
            raise ValueError(f"no solvable problem in {MAX_ATTEMPTS} draws with numbers {min_number}..{max_number} "
                             f"and targets {min_target}..{max_target}; widen the target range")
    return problems
