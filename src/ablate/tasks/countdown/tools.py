"""Countdown's tools (the tool hooks of its task, `CountdownTask.tools`), run by any rollout engine
through the interface of `ablate.rollout.tools.Tool`:

* `Calculator` (paper 003): `<calc>expr</calc>` -> `<result>value</result>` or `<result>ERR</result>`.
  Stateless, so its session is itself and `reply(generated)` can be called on it directly.
* `Oracle` (paper 004): after each model line `... Try: a op b`, the solver's GOOD / BAD / END line
  (or an error line for an unavailable number or an unreadable step); at most `max_messages // 2`
  steps, after which a non-final answer ends the rollout (the paper's message limit).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping, Sequence

from transformers import PreTrainedTokenizerBase

from ablate.config import require
from ablate.models import prompt_text
from ablate.rollout.schedules import show_preamble

from .arith import ArithmeticFormatError, evaluate, format_number
from .problem import Problem
from .prompts import OracleFormat, parse_oracle_problem
from .solver import Step, oracle


class Calculator:
    """`<calc>expr</calc>` -> `<result>value</result>` (`<result>ERR</result>` when `expr` is not
    arithmetic or divides by zero), at most `max_calls` times per rollout. Never `eval`."""

    kind = "calculator"
    stop_strings = ("</calc>",)
    validates_with_tool = False  # paper 003's question is the skill without it

    @classmethod
    def from_config(cls, t: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, template: str) -> "Calculator":
        return cls(tokenizer, int(t["max_calls"]))

    @staticmethod
    def check(t: Mapping[str, Any]) -> None:
        pass

    @staticmethod
    def prompt_text(task: Any, problem: Problem, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """The task prompt, with the calculator preamble (D.2's 2-shot system prompt; the compact
        template's leading `<calc>`) where `tool.prompt` (`mode`) says so (`show_preamble`)."""
        return prompt_text(task, problem, template, tokenizer, calculator=show_preamble(mode, available))

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_calls: int = 8):
        vocab = tokenizer.get_vocab()
        if "<calc>" not in vocab or "</calc>" not in vocab:
            raise ValueError("the calculator needs <calc> and </calc> as single tokens in the tokenizer")
        self.tokenizer = tokenizer
        self.open_id, self.close_id = vocab["<calc>"], vocab["</calc>"]
        self.stop_ids = frozenset({self.close_id})
        self.max_calls = max_calls

    @staticmethod
    def answer(expression: str) -> str:
        try:  # evaluate bounds the digits of every value (.arith)
            return f"<result>{format_number(evaluate(expression.strip()))}</result>"
        except (ArithmeticFormatError, ZeroDivisionError, ValueError):
            return "<result>ERR</result>"

    def session(self, prompt_ids: Sequence[int] | None = None) -> "Calculator":
        return self  # nothing to remember between calls

    def reply(self, generated: list[int]) -> list[int] | None:
        """Token ids to splice in after `generated` (which ends with `</calc>`), or None when
        there is no open `<calc>` to answer."""
        opens = [i for i, t in enumerate(generated[:-1]) if t == self.open_id]
        if not opens:
            return None
        text = self.tokenizer.decode(generated[opens[-1] + 1:-1], skip_special_tokens=True)
        return self.tokenizer(self.answer(text), add_special_tokens=False)["input_ids"]

    @staticmethod
    def errors(tool_text: str) -> int:
        return tool_text.count("<result>ERR</result>")

    @staticmethod
    def rollout_metrics(texts: Sequence[str]) -> dict[str, float]:
        """Rollouts that write `<calc>` at all (with or without the calculator: paper 003's residual emission)."""
        return {"tool/calc_emission_rate": sum("<calc>" in text for text in texts) / len(texts)}


class Oracle:
    """Paper 004's solver as a tool: it answers each model line of the search format (see
    `.prompts.OracleFormat`) with GOOD, BAD, END or an error, judging the
    step against the true state of the search (the problem's numbers, updated by every GOOD step),
    not the numbers the model claims are available."""

    kind = "oracle"
    stop_strings = ("\n",)
    validates_with_tool = True  # the search format needs GOOD/BAD/END: without them no answer comes

    @classmethod
    def from_config(cls, t: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, template: str) -> "Oracle":
        return cls(tokenizer, compact=template == "compact", max_messages=int(t["max_messages"]))

    @staticmethod
    def check(t: Mapping[str, Any]) -> None:
        require(int(t["max_messages"]) >= 2, f"tool.max_messages={t['max_messages']} must be >= 2 (a step and its answer)")
        require(0 <= float(t["mistake_rate"]) < 1, f"tool.mistake_rate={t['mistake_rate']} must be in [0, 1)")

    @staticmethod
    def prompt_text(task: Any, problem: Problem, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """Paper 004's search prompt, answered or not (the no_tool regime keeps the format)."""
        return prompt_text(task, problem, template, tokenizer, oracle=True)

    def __init__(self, tokenizer: PreTrainedTokenizerBase, compact: bool, max_messages: int = 20):
        self.tokenizer = tokenizer
        self.format = OracleFormat(compact)
        self.max_messages = max_messages
        self.max_calls = max_messages // 2  # each step is two messages: the model's and the solver's
        # Every token that ends a line (a BPE vocabulary has several: "\n", ".\n", "\n\n", ...); the
        # answer is spliced in after the token, so a token with text after its newline cannot end a step.
        self.stop_ids = frozenset(i for t, i in tokenizer.get_vocab().items()
                                  if tokenizer.convert_tokens_to_string([t]).endswith("\n"))

    def session(self, prompt_ids: Sequence[int]) -> "OracleSession":
        problem = parse_oracle_problem(self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False))
        if problem is None:
            raise ValueError("tool=oracle: the prompt states no problem in the oracle format "
                             "(`Available: [..]. Target: N.` or the compact `a b c -> N`)")
        return OracleSession(self, *problem)

    def errors(self, tool_text: str) -> int:
        return sum(self.format.is_error(line) for line in tool_text.split("\n"))

    @staticmethod
    def rollout_metrics(texts: Sequence[str]) -> dict[str, float]:
        return {}  # its answers' counts are the generic tool/ metrics


class OracleSession:
    """One rollout's search state: available numbers, right steps, steps answered."""

    def __init__(self, tool: Oracle, numbers: Sequence[int], target: int):
        self.tool = tool
        self.available = [Fraction(n) for n in numbers]
        self.target = Fraction(target)
        self.right_steps: list[Step] = []
        self.answered = 0
        self.cursor = 0  # generated tokens up to here are already answered (or are answers)

    def reply(self, generated: list[int]) -> list[int] | None:
        tool, fmt = self.tool, self.tool.format
        line = tool.tokenizer.decode(generated[self.cursor:], skip_special_tokens=True)
        if "<answer>" in line or not line.strip():
            self.cursor = len(generated)
            return None  # the final answer, or an empty line: nothing to check
        operation = fmt.parse_try(line)
        if operation is None:
            text, final = fmt.unreadable(), False
        else:
            left, op, right = operation
            answer = oracle(self.available, left, op, right, self.target)
            if answer.verdict in ("GOOD", "END"):
                self.right_steps.append(Step(left, op, right, answer.result))
                self.available = list(answer.available)
            text, final = fmt.reply(answer, left, op, right), answer.verdict == "END"
        self.answered += 1
        ids = tool.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.answered >= tool.max_calls and not final:
            ids = ids + [tool.tokenizer.eos_token_id]  # out of messages: the search ends here
        self.cursor = len(generated) + len(ids)
        return ids
