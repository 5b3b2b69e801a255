"""Countdown's solver preference pairs (`stage.pairs.source=solver`, a hook of the Countdown task).

Chosen = a correct solution trace, rendered exactly like the SFT traces; rejected = a wrong one of a
kind drawn in fixed proportions (`stage.pairs.solver.mix`):
- `wrong_value`: a near miss: of 8 random paths of valid operations on the given numbers
  (non-negative integer intermediates), the one that ends closest to, but not at, the target
  (a search failure: right numbers, right arithmetic, wrong value);
- `wrong_numbers`: a correct-looking trace that reaches the target with one number misread
  (replaced by one within 9 of it, else by any of 1..99) or, failing that, left out;
- `substitution`: paper 004's substitution error: the chosen trace's reasoning, but the answer
  is the last operation with intermediate results left in (`84-63` instead of `52+90-58-63`).
Every rejected response is checked with `judge` to have the verdict of its kind.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Mapping, Sequence

from ablate import seeds
from ablate.pairs import Pair, quotas

from .arith import format_number
from .problem import Problem
from .solver import Step, random_solution
from .traces import render_trace, solution_steps
from .verifier import PAIR_KINDS as REJECTED_KINDS
from .verifier import Verdict, judge

_VERDICT_OF = {"wrong_value": Verdict.WRONG_VALUE, "wrong_numbers": Verdict.WRONG_NUMBERS,
               "substitution": Verdict.SUBSTITUTION_ERROR}


def _apply(a: Fraction, op: str, b: Fraction) -> Fraction:
    return a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b


def random_path(numbers: Sequence[int], rng: random.Random) -> list[Step]:
    """Combine two available numbers at a time until one is left, choosing among the operations
    that keep intermediates non-negative integers (as solver traces do) where possible."""
    pool = [Fraction(n) for n in numbers]
    steps = []
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        a, b = max(pool[i], pool[j]), min(pool[i], pool[j])
        ops = ["+", "-", "*"] + (["/"] if b != 0 and a % b == 0 else [])
        op = rng.choice(ops)
        result = _apply(a, op, b)
        pool = [x for k, x in enumerate(pool) if k not in (i, j)] + [result]
        steps.append(Step(a, op, b, result))
    return steps


def _wrong_value(problem: Problem, rng: random.Random, style: str, compact: bool, tries: int = 8) -> str | None:
    """A near miss: of `tries` random paths, the one ending closest to (but not at) the target."""
    paths = [random_path(problem.numbers, rng) for _ in range(tries)]
    misses = [steps for steps in paths if steps[-1].result != problem.target]
    if not misses:
        return None
    best = min(misses, key=lambda steps: abs(steps[-1].result - problem.target))
    return render_trace(problem, best, style, compact)


def _wrong_numbers(problem: Problem, rng: random.Random, style: str, compact: bool) -> str | None:
    numbers = list(problem.numbers)
    # Misread one number: as a nearby one (within 9) if any such trace exists, else as any of 1..99 ...
    near = [(k, numbers[k] + d) for k in range(len(numbers)) for d in range(-9, 10)
            if d and numbers[k] + d >= 1 and numbers[k] + d not in numbers]
    far = [(k, v) for k in range(len(numbers)) for v in range(1, 100) if abs(v - numbers[k]) > 9 and v not in numbers]
    rng.shuffle(near)
    rng.shuffle(far)
    for k, misread in near + far:
        changed = Problem(tuple(numbers[:k] + [misread] + numbers[k + 1:]), problem.target)
        steps = random_solution(changed.numbers, changed.target, rng)
        if steps is not None:
            return render_trace(changed, steps, style, compact)
    for k in rng.sample(range(len(numbers)), len(numbers)):  # ... or leave one out
        fewer = Problem(tuple(numbers[:k] + numbers[k + 1:]), problem.target)
        steps = random_solution(fewer.numbers, fewer.target, rng)
        if steps is not None:
            return render_trace(fewer, steps, style, compact)
    return None


def _substitution(problem: Problem, chosen_steps: list[Step], chosen: str, compact: bool) -> str | None:
    if len(chosen_steps) < 2:
        return None
    last = chosen_steps[-1]
    sep = "" if compact else " "
    answer = f"{format_number(last.left)}{sep}{last.op}{sep}{format_number(last.right)}"
    head = chosen[: chosen.rindex("<answer>")]
    return f"{head}<answer>{answer}</answer>" if compact else f"{head}<answer> {answer} </answer>"


def solver_pair(problem: Problem, prompt: str, kind: str, rng: random.Random, style: str = "plain",
                compact: bool = True) -> Pair | None:
    """One pair for `problem` with a rejected response of `kind`; None if none could be made."""
    steps = solution_steps(problem, rng)
    chosen = render_trace(problem, steps, style, compact)
    if kind == "wrong_value":
        rejected = _wrong_value(problem, rng, style, compact)
    elif kind == "wrong_numbers":
        rejected = _wrong_numbers(problem, rng, style, compact)
    elif kind == "substitution":
        rejected = _substitution(problem, steps, chosen, compact)
    else:
        raise ValueError(f"unknown rejected kind {kind!r}; expected one of {REJECTED_KINDS}")
    if rejected is None or judge(rejected, problem.numbers, problem.target).verdict is not _VERDICT_OF[kind]:
        return None
    return Pair(prompt, chosen, rejected, kind, problem.n_numbers, problem.id)


def solver_pairs(problems: Sequence[Problem], prompts: Sequence[str], mix: Mapping[str, float], seed: int,
                 style: str = "plain", compact: bool = True) -> list[Pair]:
    """One pair per problem; kinds assigned by exact quotas of `mix`, shuffled with `seed`. A
    problem whose kind cannot be made (rare: e.g. no wrong path exists) falls back to the other
    kinds in order, so the fractions can be off by those few."""
    unknown = sorted(set(mix) - set(REJECTED_KINDS))
    if unknown:
        raise ValueError(f"stage.pairs.solver.mix: unknown kinds {unknown}; expected {list(REJECTED_KINDS)}")
    kinds = [k for k, c in quotas(len(problems), mix).items() for _ in range(c)]
    seeds.rng(seed, "kinds").shuffle(kinds)
    pairs = []
    for index, (problem, prompt, kind) in enumerate(zip(problems, prompts, kinds)):
        rng = seeds.rng(seed, "pair", index)
        for attempt in [kind] + [k for k in REJECTED_KINDS if k != kind and mix.get(k, 0) > 0]:
            pair = solver_pair(problem, prompt, attempt, rng, style, compact)
            if pair is not None:
                pairs.append(pair)
                break
    return pairs
