"""Countdown: reach a target from given numbers with + - * /, each number used exactly once."""

from .arith import ArithmeticFormatError, evaluate, format_number, numbers_in
from .data import Splits, build_splits, load_file, load_hub, save_problems, split_test
from .generator import generate
from .problem import Problem
from .prompts import (TEMPLATES, calculator_messages, compact_prompt, oracle_messages, oracle_reply, oracle_step,
                      parse_oracle_try, render_chatml, render_prompt, tinyzero_messages)
from .solver import (OracleAnswer, Step, count_solutions, is_solvable, oracle, reachable_integers,
                     reachable_values, search, search_hardness, solve, steps_to_expression)
from .verifier import VERDICTS, Judgement, Reward, Verdict, compute_score, judge, last_answer
from .task import CountdownTask  # noqa: E402 - registers task.name=countdown in ablate.tasks.TASKS

__all__ = [
    "ArithmeticFormatError", "evaluate", "format_number", "numbers_in",
    "Splits", "build_splits", "load_file", "load_hub", "save_problems", "split_test",
    "generate", "Problem",
    "TEMPLATES", "calculator_messages", "compact_prompt", "oracle_messages", "oracle_reply", "oracle_step",
    "parse_oracle_try", "render_chatml", "render_prompt", "tinyzero_messages",
    "OracleAnswer", "Step", "count_solutions", "is_solvable", "oracle", "reachable_integers", "reachable_values",
    "search", "search_hardness", "solve", "steps_to_expression",
    "VERDICTS", "Judgement", "Reward", "Verdict", "compute_score", "judge", "last_answer",
    "CountdownTask",
]
