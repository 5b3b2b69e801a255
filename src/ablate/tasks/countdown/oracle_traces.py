"""Synthetic solver trajectories for SFT in paper 004's format (its section 3.3).

At each step a random legal operation on two available numbers is tried and the solver's answer
recorded: GOOD applies it (new available numbers, one more right step), BAD leaves the state as it
was, END means the target is reached and the trajectory closes with the answer (intermediate
results substituted back, `steps_to_expression`). Operations that can never help are pruned, as
in the paper: repeating an operation that got BAD in the same state, and subtracting a larger
number from a smaller one (negative intermediates are never needed to reach a positive target;
the mirrored subtraction, larger minus smaller, stays available). With probability `mistake_rate`
a step deliberately names a number that is not available (preferably one already used up); the
tool rejects it with an error and the state is unchanged, because the paper found this mistake
common and wanted the model to see the tool's answer to it.

The solver answers at most `max_messages // 2` steps (paper 004: a limit of 20 messages). A random
walk that runs out of messages is redrawn (rejection sampling: the data are the successful random
walks); after `max_attempts` failures the walk is steered to a GOOD step whenever the remaining
budget would otherwise not suffice, so every trajectory ends at a correct answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from .problem import Problem
from .prompts import OracleFormat
from .solver import OracleAnswer, Step, oracle, steps_to_expression

Operation = tuple[Fraction, str, Fraction]


def operation_key(operation: Operation) -> tuple:
    """An operation up to commutativity: `a + b` and `b + a` are one operation."""
    left, op, right = operation
    return (op, *sorted((left, right))) if op in "+*" else operation


def all_steps(available: Sequence[int | Fraction]) -> list[Operation]:
    """Every distinct operation on two available numbers (commutative ones once, larger first;
    both orders of - and /; no division by zero)."""
    values = [Fraction(v) for v in available]
    seen, out = set(), []
    for i in range(len(values)):
        for j in range(len(values)):
            if i == j:
                continue
            a, b = values[i], values[j]
            for op in "+-*/":
                if (op in "+*" and a < b) or (op == "/" and b == 0):
                    continue
                step = (a, op, b)
                if operation_key(step) not in seen:
                    seen.add(operation_key(step))
                    out.append(step)
    return out


def is_pruned(operation: Operation, bad: set[tuple]) -> bool:
    """Pruned as never useful: a negative subtraction, or an operation that already got BAD here."""
    left, op, right = operation
    return (op == "-" and left < right) or operation_key(operation) in bad


def legal_steps(available: Sequence[int | Fraction], bad: set[tuple]) -> list[Operation]:
    return [s for s in all_steps(available) if not is_pruned(s, bad)]


@dataclass(frozen=True)
class Turn:
    """One step: the state the model saw, what it tried, and the solver's answer."""

    available: tuple[Fraction, ...]
    right_steps: tuple[Step, ...]
    operation: Operation
    answer: OracleAnswer
    mistake: bool = False  # deliberately names an unavailable number


@dataclass(frozen=True)
class Trajectory:
    problem: Problem
    turns: tuple[Turn, ...]
    answer: str  # the final expression, intermediate results substituted
    attempts: int = 1  # random walks drawn (the last one kept)
    steered: bool = False  # the fallback steered it to GOOD steps
    right_steps: tuple[Step, ...] = field(default=())

    @property
    def mistakes(self) -> int:
        return sum(t.mistake for t in self.turns)

    def segments(self, fmt: OracleFormat) -> list[tuple[str, bool]]:
        """(text, written by the tool) pieces of the response, in order."""
        out: list[tuple[str, bool]] = []
        for turn in self.turns:
            left, op, right = turn.operation
            out.append((fmt.step(turn.available, turn.right_steps, left, op, right), False))
            out.append((fmt.reply(turn.answer, left, op, right), True))
        out.append((fmt.answer(self.answer), False))
        return out

    def text(self, fmt: OracleFormat) -> str:
        return "".join(text for text, _ in self.segments(fmt))


def _mistake(available: list[Fraction], used: list[Fraction], rng: random.Random) -> Operation:
    """An operation naming one number that is not available: a used-up one if there is one."""
    gone = [v for v in used if v not in available]
    if gone:
        wrong = rng.choice(gone)
    else:
        wrong = Fraction(rng.choice([n for n in range(1, 100) if Fraction(n) not in available]))
    other = rng.choice(available)
    return (wrong, rng.choice("+-*/"), other) if rng.random() < 0.5 else (other, rng.choice("+-*"), wrong)


def _walk(problem: Problem, rng: random.Random, mistake_rate: float, max_steps: int,
          steer: bool) -> tuple[list[Turn], list[Step]] | None:
    available = [Fraction(n) for n in problem.numbers]
    target = Fraction(problem.target)
    used: list[Fraction] = []
    right: list[Step] = []
    bad: set[tuple] = set()
    turns: list[Turn] = []
    while len(turns) < max_steps:
        budget = max_steps - len(turns)
        if rng.random() < mistake_rate and budget > len(available) - 1:
            operation = _mistake(available, used, rng)
            turns.append(Turn(tuple(available), tuple(right), operation,
                              oracle(available, *operation, target=target), mistake=True))
            continue
        candidates = legal_steps(available, bad)
        if steer and budget <= len(available) - 1:
            # Exactly enough messages left for a direct path: only steps that keep the target reachable.
            candidates = [c for c in candidates if oracle(available, *c, target=target).verdict in ("GOOD", "END")]
        operation = rng.choice(candidates)
        answer = oracle(available, *operation, target=target)
        turns.append(Turn(tuple(available), tuple(right), operation, answer))
        if answer.verdict == "BAD":
            bad.add(operation_key(operation))
            continue
        left, op, r = operation
        right.append(Step(left, op, r, answer.result))
        used += [left, r]
        available = list(answer.available)
        bad = set()  # a new state: nothing has been tried in it
        if answer.verdict == "END":
            return turns, right
    return None


def oracle_trajectory(problem: Problem, rng: random.Random, mistake_rate: float = 0.05, max_messages: int = 20,
                      max_attempts: int = 20) -> Trajectory:
    """A solver trajectory for `problem` ending at a correct answer (see the module docstring)."""
    if problem.n_numbers < 2:
        raise ValueError(f"problem {problem.id}: the oracle format needs at least two numbers")
    max_steps = max_messages // 2
    if max_steps < problem.n_numbers - 1:
        raise ValueError(f"max_messages={max_messages} allows {max_steps} steps; problem {problem.id} needs "
                         f"{problem.n_numbers - 1}: raise tool.max_messages")
    for attempt in range(1, max_attempts + 2):
        steer = attempt > max_attempts
        walk = _walk(problem, rng, mistake_rate, max_steps, steer)
        if walk is not None:
            turns, right = walk
            return Trajectory(problem, tuple(turns), steps_to_expression(problem.numbers, right), attempt, steer,
                              tuple(right))
    raise ValueError(f"problem {problem.id} has no solution")
