"""Tools the rollout loop can run mid-generation, engine-agnostic: the policy writes a call, the
tool's answer is spliced into the sequence as tokens the policy did not sample (masked from the loss).

The interface an engine needs (`Tool`): `stop_ids` (token ids after which the tool may answer;
`stop_strings` is the same as text, for engines that stop on strings), `max_calls` (answers per
rollout), and `session(prompt_ids)`, one per rollout, whose `reply(generated)` returns the token ids
to splice in after the tokens generated so far, or None. The engine counts answers and stops
asking after `max_calls`. A reply may end with the eos token: the tool ends the rollout.

A tool class also owns its prompt decoration: `prompt_text(problem, template, tokenizer, mode,
available)` is the prompt of a rollout it does (`available`) or does not answer, `mode` being
`tool.prompt`. `ToolPrompt` gives the prompts of a `tool` config to every caller (RL rollouts,
evaluation in both regimes, validation), so no caller tests which tool it is.

* `Calculator` (paper 003): `<calc>expr</calc>` -> `<result>value</result>` or `<result>ERR</result>`.
  Stateless, so its session is itself and `reply(generated)` can be called on it directly.
* `Oracle` (paper 004): after each model line `... Try: a op b`, the solver's GOOD / BAD / END line
  (or an error line for an unavailable number or an unreadable step); at most `max_messages // 2`
  steps, after which a non-final answer ends the rollout (the paper's message limit).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping, Protocol, Sequence

from transformers import PreTrainedTokenizerBase

from ablate.models import encode_prompt, prompt_text
from ablate.rollout.schedules import show_preamble
from ablate.tasks.countdown import Problem
from ablate.tasks.countdown.arith import ArithmeticFormatError, evaluate, format_number
from ablate.tasks.countdown.prompts import OracleFormat, parse_oracle_problem
from ablate.tasks.countdown.solver import Step, oracle

# tool.kind -> tool class (`register`): `build_tool` and the config check read this.
TOOLS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: `tool.kind=<cls.kind>` builds `cls.from_config(tool_cfg, tokenizer, template)`,
    after `cls.check(tool_cfg)` (ConfigError naming the key) at start-up."""
    TOOLS[cls.kind] = cls
    return cls


class ToolSession(Protocol):
    def reply(self, generated: list[int]) -> list[int] | None: ...


class Tool(Protocol):
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    max_calls: int
    # Validation during training (`eval.val_regime=auto`) runs with the tool answering when a model trained
    # on it cannot do the task without it (its format waits for the tool's replies).
    validates_with_tool: bool

    def session(self, prompt_ids: Sequence[int]) -> ToolSession: ...

    def errors(self, tool_text: str) -> int:
        """How many of the tool's answers in `tool_text` (the tool-written text of one rollout) are errors."""

    @staticmethod
    def prompt_text(problem: Problem, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """The prompt of a rollout the tool does (`available`) or does not answer; `mode` is `tool.prompt`."""


@register
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
    def prompt_text(problem: Problem, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """The task prompt, with the calculator preamble (D.2's 2-shot system prompt; the compact
        template's leading `<calc>`) where `tool.prompt` (`mode`) says so (`show_preamble`)."""
        return prompt_text(problem, template, tokenizer, calculator=show_preamble(mode, available))

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
        try:  # evaluate bounds the digits of every value (ablate.tasks.countdown.arith)
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


@register
class Oracle:
    """Paper 004's solver as a tool: it answers each model line of the search format (see
    `ablate.tasks.countdown.prompts.OracleFormat`) with GOOD, BAD, END or an error, judging the
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
        from ablate.config import require

        require(int(t["max_messages"]) >= 2, f"tool.max_messages={t['max_messages']} must be >= 2 (a step and its answer)")
        require(0 <= float(t["mistake_rate"]) < 1, f"tool.mistake_rate={t['mistake_rate']} must be in [0, 1)")

    @staticmethod
    def prompt_text(problem: Problem, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """Paper 004's search prompt, answered or not (the no_tool regime keeps the format)."""
        return prompt_text(problem, template, tokenizer, oracle=True)

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


TOOL_OFF = {"kind": "calculator", "schedule": "off", "prompt": "when_available"}  # no `tool` config given


class ToolPrompt:
    """The prompts of a run under its `tool` config (None: no tool): the tool's class decorates them
    (`prompt_text`), given whether the tool answers the rollout. Builds no tool, so it serves the no_tool
    regime and tokenizers that lack the tool's tokens alike."""

    def __init__(self, tool_cfg: Mapping[str, Any] | None, template: str, tokenizer: PreTrainedTokenizerBase):
        tool_cfg = tool_cfg or TOOL_OFF
        kind = tool_cfg.get("kind", "calculator")
        if kind not in TOOLS:
            raise ValueError(f"tool.kind={kind!r}: expected one of {tuple(TOOLS)}")
        self.tool_class, self.mode = TOOLS[kind], tool_cfg.get("prompt", "when_available")
        self.template, self.tokenizer = template, tokenizer

    def text(self, problem: Problem, available: bool) -> str:
        return self.tool_class.prompt_text(problem, self.template, self.tokenizer, self.mode, available)

    def ids(self, problem: Problem, available: bool) -> list[int]:
        return encode_prompt(self.text(problem, available), self.tokenizer)


def build_tool(tool_cfg: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, template: str):
    """The tool a `tool` config names (whatever its schedule: availability is the caller's business)."""
    kind = tool_cfg.get("kind", "calculator")
    if kind not in TOOLS:
        raise ValueError(f"tool.kind={kind!r}: expected one of {tuple(TOOLS)}")
    return TOOLS[kind].from_config(tool_cfg, tokenizer, template)


def check_tool(cfg) -> None:
    """`tool=` config: ConfigError naming the key and the fix (whether a stage takes the tool is the
    stage's check: ablate.stages)."""
    from ablate.config import require
    from ablate.rollout.schedules import PROMPT_MODES, SCHEDULES

    t = cfg.tool
    require(t.kind in TOOLS, f"tool.kind={t.kind!r}: expected one of {tuple(TOOLS)}")
    require(t.schedule in SCHEDULES, f"tool.schedule={t.schedule!r}: expected one of {SCHEDULES}")
    require(t.prompt in PROMPT_MODES, f"tool.prompt={t.prompt!r}: expected one of {PROMPT_MODES}")
    ratio, stages = t.get("anneal_ratio", 0.667), t.get("stages", 1)
    require(0 < float(ratio) <= 1, f"tool.anneal_ratio={ratio} must be in (0, 1] (T_anneal = anneal_ratio * stage.max_steps)")
    require(int(stages) >= 1, f"tool.stages={stages} must be >= 1 (anneal_step's number of levels)")
    require(t.max_calls >= 1, f"tool.max_calls={t.max_calls} must be >= 1")
    TOOLS[t.kind].check(t)
