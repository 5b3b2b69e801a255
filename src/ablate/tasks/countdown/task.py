"""Countdown as an `ablate.tasks.base.Task`: the registry's `task.name=countdown`.

The parts are this package's: splits from `data.build_splits`, prompts from `prompts`, scoring by
`verifier.Reward` (the `reward=` config: a value per verdict), SFT traces from `traces` and
`oracle_traces`, the calculator and the solver oracle as tools (`tools`), solver preference pairs
(`pairs`). The report level is the operand count (`n_numbers`, `by_operands/<n>/...`).
"""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from ablate.config import ConfigError, require
from ablate.config.schemas import typed
from ablate.tasks.base import OPERANDS, TASKS, Messages, Splits

from .data import SOURCES, build_splits
from .generator import check_generator_args
from .oracle_traces import oracle_trajectory
from .pairs import solver_pairs
from .problem import Problem
from .schema import CountdownTaskConfig
from .prompts import OracleFormat, calculator_messages, compact_prompt, oracle_messages, tinyzero_messages
from .solver import search_hardness
from .traces import SFT_STYLES, TRACE_STYLES, sft_response, trace_style
from .verifier import PAIR_KINDS, VERDICTS, Reward


@TASKS.register
class CountdownTask:
    name = "countdown"
    schema = CountdownTaskConfig
    verdicts = VERDICTS
    level_column, level_block = OPERANDS
    # curriculum.difficulty.field: one level per operand count, or quantile bins of the solver's search effort
    difficulty_fields = {"n_numbers": "levels", "hardness": "quantiles"}
    trace_styles = SFT_STYLES  # stage.trace: plain, calc, mixed (per trace, calc or plain: `trace_style`), oracle
    tool_styles = ("calc", "oracle")  # traces a tool answered: their prompts are decorated as such
    pair_trace_styles = TRACE_STYLES  # stage.pairs.solver.trace (solver pairs render one style throughout)
    pair_kinds = PAIR_KINDS

    def __init__(self, task_cfg: Mapping[str, Any] | CountdownTaskConfig, reward: Reward):
        self.cfg = typed(CountdownTaskConfig, task_cfg)  # keys left out: the schema's defaults
        self.reward = reward

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any] | CountdownTaskConfig,
                    reward_cfg: Mapping[str, Any]) -> "CountdownTask":
        return cls(task_cfg, Reward.from_config(reward_cfg))

    @classmethod
    def check(cls, cfg: Any) -> None:
        """`task=countdown` and the `reward=` variant it scores with: ConfigError naming the key and the fix."""
        t = cfg.task
        require(t.source in SOURCES, f"task.source={t.source!r}: expected one of {SOURCES}")
        require(0 < t.test_size < t.test_pool, f"task.test_size={t.test_size} must be > 0 and < task.test_pool={t.test_pool}")
        try:
            check_generator_args(list(t.generator.counts), t.generator.min_number, t.generator.max_number,
                                 t.generator.min_target, t.generator.max_target)
            Reward.from_config(cfg.reward)
        except (ValueError, KeyError) as err:
            raise ConfigError(f"task.generator / reward: {err} (task=countdown scores with a value per verdict: "
                              "reward=tinyzero, binary or partial)") from None

    @classmethod
    def tools(cls) -> dict[str, type]:
        from .tools import Calculator, Oracle  # heavy: torch/transformers, off ablate.stats, which reads ablate.tasks

        return {Calculator.kind: Calculator, Oracle.kind: Oracle}

    def splits(self, pool_size: int | None = None, val_size: int = 0, label_test: bool = True) -> Splits:
        return build_splits(self.cfg, pool_size=pool_size, label_test=label_test, val_size=val_size)

    def render(self, problem: Problem, template: str, calculator: bool = False, oracle: bool = False) -> str | Messages:
        """The compact template's text for the tiny model, else TinyZero's messages (D.2's calculator
        system prompt with `calculator` or template=calculator; paper 004's search prompt with `oracle`;
        the compact template is the same for the oracle: its first model line restates the numbers)."""
        if template == "compact":
            return compact_prompt(problem.numbers, problem.target, calculator=calculator and not oracle)
        if template not in ("tinyzero", "calculator"):
            raise ValueError(f"model.template={template!r}: expected compact, tinyzero or calculator")
        build = (oracle_messages if oracle else calculator_messages if calculator or template == "calculator"
                 else tinyzero_messages)
        return build(problem.numbers, problem.target)

    def score(self, problem: Problem, completion: Any) -> tuple[float, str]:
        value, judgement = self.reward(completion, problem.numbers, problem.target)
        return value, judgement.verdict.value

    def level(self, problem: Problem) -> int:
        return problem.n_numbers

    def difficulty(self, problems: Sequence[Problem], field: str) -> list[int]:
        if field == "n_numbers":
            return [p.n_numbers for p in problems]
        if field == "hardness":  # training pools are unlabelled: the solver's effort is computed here
            return [p.hardness if p.hardness is not None else search_hardness(p.numbers, p.target) for p in problems]
        raise ValueError(f"curriculum.difficulty.field={field!r}: expected one of {tuple(self.difficulty_fields)}")

    def record(self, problem: Problem) -> dict[str, Any]:
        return {"id": problem.id, "numbers": list(problem.numbers), "target": problem.target,
                "n_numbers": problem.n_numbers, "difficulty": problem.difficulty()}

    def trace_style(self, style: str, rng: random.Random) -> str:
        """The style of one SFT trace: `mixed` draws calc or plain from the trace's own generator (before
        the trace itself, so a calc trace's prompt is decorated as one the calculator answers)."""
        return trace_style(style, rng)

    def sft_segments(self, problem: Problem, rng: random.Random, style: str, compact: bool,
                     oracle: Mapping[str, Any] | None = None) -> list[tuple[str, bool]]:
        """A solver trace (`plain`, `calc`: one piece; its `<result>` spans are the calculator's), or
        paper 004's solver trajectory (`oracle`: the solver's lines are tool pieces)."""
        if style == "oracle":
            oracle = dict(oracle or {"mistake_rate": 0.05, "max_messages": 20})
            trajectory = oracle_trajectory(problem, rng, float(oracle["mistake_rate"]), int(oracle["max_messages"]))
            return trajectory.segments(OracleFormat(compact))
        return [(sft_response(problem, rng, style, compact), False)]

    def solver_pairs(self, problems: Sequence[Problem], prompts: Sequence[str], mix: Mapping[str, float], seed: int,
                     style: str = "plain", compact: bool = True) -> list:
        return solver_pairs(problems, prompts, mix, seed, style, compact)
