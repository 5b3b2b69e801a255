"""Supervised traces from solver solutions: what the SFT stage teaches.

A trace is a short `<think>` with the steps that reach the target, then the answer. Styles:
* `plain`: the model writes each step's arithmetic itself: `<think>44+19=63 63+35=98</think>...`
* `calc`: each step is a calculator call whose result the tool fills in:
  `<think><calc>44+19</calc><result>63</result> <calc>63+35</calc><result>98</result></think>...`
  (the `<result>...</result>` spans are tool output and are masked out of the loss).
* `mixed`: each trace is `calc` (its prompt decorated as one the calculator answers) or `plain`
  (undecorated), one half each: a tool-dispatch SFT that keeps the no-tool skill (issue 29; the
  `calc` SFT forgets it: no-tool pass@1 0.0165 against the shipped SFT's 0.316).
* `oracle`: paper 004's search with the solver's answers (`oracle_traces.oracle_trajectory`; the
  solver's lines are masked out of the loss).
`compact=True` (the tiny model's template) drops spaces; otherwise the text reads like TinyZero's.
"""

from __future__ import annotations

import random

from .arith import format_number
from .problem import Problem
from .solver import Step, random_solution, steps_to_expression

TRACE_STYLES = ("plain", "calc", "oracle")
SFT_STYLES = ("plain", "calc", "mixed", "oracle")  # what stage.trace may name (mixed: per trace, calc or plain)
STEP_STYLES = ("plain", "calc")  # rendered from one solution path by render_trace
MIXED_CALC_FRACTION = 0.5


def trace_style(style: str, rng: random.Random) -> str:
    """The style of one trace: `mixed` draws calc or plain from the trace's own generator."""
    if style != "mixed":
        return style
    return "calc" if rng.random() < MIXED_CALC_FRACTION else "plain"


def solution_steps(problem: Problem, rng: random.Random) -> list[Step]:
    """A random solution path, with non-negative integer intermediates where possible."""
    steps = random_solution(problem.numbers, problem.target, rng)
    if steps is None:
        raise ValueError(f"problem {problem.id} has no solution")
    return steps


def render_trace(problem: Problem, steps: list[Step], style: str = "plain", compact: bool = True) -> str:
    if style not in STEP_STYLES:
        raise ValueError(f"render_trace: trace style {style!r} is not one of {STEP_STYLES} "
                         "(oracle trajectories come from oracle_traces.oracle_trajectory)")
    answer = steps_to_expression(problem.numbers, steps)
    sep = "" if compact else " "
    parts = []
    for step in steps:
        operation = f"{format_number(step.left)}{sep}{step.op}{sep}{format_number(step.right)}"
        if style == "plain":
            parts.append(f"{operation}{sep}={sep}{format_number(step.result)}")
        else:
            parts.append(f"<calc>{operation}</calc><result>{format_number(step.result)}</result>")
    if compact:
        return f"<think>{' '.join(parts)}</think><answer>{answer.replace(' ', '')}</answer>"
    return f"<think> {' '.join(parts)} </think>\n<answer> {answer} </answer>"


def sft_response(problem: Problem, rng: random.Random, style: str = "plain", compact: bool = True) -> str:
    return render_trace(problem, solution_steps(problem, rng), style, compact)
