"""Prompt templates, one function per template, each returning chat messages or plain text.

* `tinyzero_messages`: the TinyZero/Qwen prompt exactly as in paper 003, appendix D.1 (the
  numbers printed the way TinyZero's parquet rows print them: numpy style, `[ 4 73 97 18]`).
* `calculator_messages`: the same user turn with the 2-shot calculator system prompt of D.2.
* `oracle_messages`: the structured search format of paper 004 (system + first user turn), with
  `oracle_step` / `oracle_reply` for the turns that follow and `parse_oracle_try` to read a step.
* `compact_prompt`: a short plain-text prompt for the project's own tiny character-level model
  (`calculator=True` marks an available calculator with a leading `<calc>` tag: the compact
  stand-in for D.2's preamble, one token for a model that cannot read instructions).
* `OracleFormat`: paper 004's search as one stream of lines (a model line `Available / Right steps /
  Try`, then the solver's line), in the full wording (Hub models) or a compact one (tiny model).

`render_chatml` turns messages into Qwen's ChatML text; Hub models may instead use their own
tokenizer's `apply_chat_template` on the same messages.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Sequence

from .arith import MAX_DIGITS, format_number
from .solver import OracleAnswer, Step

Messages = list[dict[str, str]]

SYSTEM_DEFAULT = "You are a helpful assistant."

TINYZERO_USER = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the answer.\n"
    "User: Using the numbers {numbers}, create an equation that equals {target}. "
    "You can use basic arithmetic operations (+, -, *, /) and each number can only be used once. "
    "Show your work in <think> </think> tags. And return the final answer in <answer> </answer> tags, "
    "for example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step."
)

CALCULATOR_SYSTEM = (
    "You are a helpful assistant.\n\n"
    "You may use an inline calculator for arithmetic. To call it, write <calc>arithmetic expression</calc>. "
    "When the calculator is available, the environment will append <result>value</result>, and you should "
    "continue solving from that result. Use only the numbers from the problem and basic arithmetic "
    "operations (+, -, *, /).\n\n"
    "Here are two examples of using the calculator:\n\n"
    "Example 1:\n"
    "Using the numbers [4, 5, 2], create an equation that equals 22.\n"
    "<think> Let me compute 4 * 5 + 2. <calc>4 * 5 + 2</calc><result>22</result> That equals 22. </think>\n"
    "<answer> 4 * 5 + 2 </answer>\n\n"
    "Example 2:\n"
    "Using the numbers [6, 3, 7], create an equation that equals 25.\n"
    "<think> First compute 6 * 3. <calc>6 * 3</calc><result>18</result> Now add 7: "
    "<calc>18 + 7</calc><result>25</result> That equals 25. </think>\n"
    "<answer> 6 * 3 + 7 </answer>"
)

ORACLE_SYSTEM = (
    "You will play the game of Countdown. The goal is to use the available numbers to reach the target. "
    "At each step, look at the available numbers and choose an arithmetic operation to do on two of them. "
    "The tool will give you feedback on your choice."
)


def numpy_list(numbers: Sequence[int]) -> str:
    """`[ 4 73 97 18]`: how a numpy int array prints, as in TinyZero's prompts."""
    width = max((len(str(n)) for n in numbers), default=0)
    return "[" + " ".join(str(n).rjust(width) for n in numbers) + "]"


def tinyzero_messages(numbers: Sequence[int], target: int) -> Messages:
    user = TINYZERO_USER.format(numbers=numpy_list(numbers), target=target)
    return [{"role": "system", "content": SYSTEM_DEFAULT}, {"role": "user", "content": user}]


def calculator_messages(numbers: Sequence[int], target: int) -> Messages:
    user = TINYZERO_USER.format(numbers=numpy_list(numbers), target=target)
    return [{"role": "system", "content": CALCULATOR_SYSTEM}, {"role": "user", "content": user}]


def _plain_list(values: Sequence[int | Fraction]) -> str:
    return "[" + ", ".join(format_number(Fraction(v)) for v in values) + "]"


def oracle_messages(numbers: Sequence[int], target: int) -> Messages:
    user = f"Available: {_plain_list(numbers)}. Target: {target}."
    return [{"role": "system", "content": ORACLE_SYSTEM}, {"role": "user", "content": user}]


def oracle_step(available: Sequence[int | Fraction], right_steps: Sequence[Step], left: int | Fraction,
                op: str, right: int | Fraction) -> str:
    """An assistant turn: `Available: [17, 2, 49]. Right steps: [17 * 2 => 34]. Try: 49 + 34`."""
    done = ", ".join(f"{format_number(s.left)} {s.op} {format_number(s.right)} => {format_number(s.result)}"
                     for s in right_steps)
    return (f"Available: {_plain_list(available)}. Right steps: [{done}]. "
            f"Try: {format_number(Fraction(left))} {op} {format_number(Fraction(right))}")


def oracle_reply(answer: OracleAnswer, left: int | Fraction, op: str, right: int | Fraction) -> str:
    """The tool turn answering one `Try:` (paper 004, figure 4)."""
    tried = f"{format_number(Fraction(left))} {op} {format_number(Fraction(right))}"
    if answer.verdict == "GOOD":
        return f"GOOD. {tried} leads to target. New available: {_plain_list(answer.available)}"
    if answer.verdict == "BAD":
        return f"BAD. {tried} does not lead to a solution."
    if answer.verdict == "END":
        return f"END. {tried} reached the target!"
    return f"ERROR. {tried} is not allowed: {answer.reason}."


_TRY = re.compile(r"Try:\s*(-?\d+(?:/\d+)?)\s*([-+*/])\s*(-?\d+(?:/\d+)?)\s*$")


def parse_oracle_try(text: str) -> tuple[Fraction, str, Fraction] | None:
    """The operation named by the `Try:` at the end of an assistant turn, or None if malformed."""
    match = _TRY.search(text.strip())
    if match is None:
        return None
    left, op, right = match.groups()
    if not _readable(left, right):
        return None
    return Fraction(left), op, Fraction(right)


def _readable(*numbers: str) -> bool:
    """Numbers short enough to read (model output can hold any number of digits; Python refuses
    to convert more than 4,300 and the solver has no use for more than a few)."""
    return all(len(n) <= MAX_DIGITS + 3 and n.strip("()-/").replace("/", "").isascii() for n in numbers)


CALC_MARK = "<calc>"  # the compact template's calculator preamble


def compact_prompt(numbers: Sequence[int], target: int, calculator: bool = False) -> str:
    """`44 19 35 -> 98` + newline: short, because the tiny model reads one character per token;
    with `calculator`, led by `<calc>` (the calculator answers in this rollout)."""
    return (CALC_MARK if calculator else "") + " ".join(str(n) for n in numbers) + f" -> {target}\n"


def render_chatml(messages: Messages, add_generation_prompt: bool = True) -> str:
    """Qwen ChatML, as Qwen2.5's chat template renders it."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


TEMPLATES = ("compact", "tinyzero", "calculator", "oracle")


def render_prompt(template: str, numbers: Sequence[int], target: int) -> str:
    """The full prompt text of `template` (chat templates rendered as ChatML)."""
    if template == "compact":
        return compact_prompt(numbers, target)
    builders = {"tinyzero": tinyzero_messages, "calculator": calculator_messages, "oracle": oracle_messages}
    if template not in builders:
        raise ValueError(f"unknown prompt template {template!r}; expected one of {TEMPLATES}")
    return render_chatml(builders[template](numbers, target))


# ---------------------------------------------------------------------------------------------
# Paper 004's search as one stream: the model writes one line per step and the solver answers
# with one line (spliced in by the rollout loop, masked from the loss), until the model answers.
#
#   full (Hub models)                                       compact (tiny model)
#   Available: [17, 2, 49]. Right steps: []. Try: 49 + 2    17 2 49||49+2
#   Tool: BAD. 49 + 2 does not lead to a solution.          BAD
#   Available: [17, 2, 49]. Right steps: []. Try: 17 * 2    17 2 49||17*2
#   Tool: GOOD. 17 * 2 leads to target. New available: ...  GOOD 49 34
#   Available: [49, 34]. Right steps: [17 * 2 => 34]. ...   49 34|17*2=34|49+34
#   Tool: END. 49 + 34 reached the target!                  END
#   <answer>49 + (17 * 2)</answer>                          <answer>49+(17*2)</answer>
#
# The compact wording keeps the three fields (available | right steps | try) at a fifth of the
# length, because the tiny model reads one character per token; a non-integer is parenthesised
# there, `(7/2)`, so that a step like `(7/2)/3` reads one way only.

_COMPACT_NUMBER = r"-?\d+|\(-?\d+/\d+\)"
_COMPACT_TRY = re.compile(rf"\|\s*({_COMPACT_NUMBER})\s*([-+*/])\s*({_COMPACT_NUMBER})\s*$")


def _compact_number(value: int | Fraction) -> str:
    value = Fraction(value)
    return format_number(value) if value.denominator == 1 else f"({format_number(value)})"


def _read_number(text: str) -> Fraction:
    return Fraction(text.strip("()"))


class OracleFormat:
    """How the oracle dialogue is written, in one of two wordings (`compact` for the tiny model)."""

    def __init__(self, compact: bool):
        self.compact = compact

    def step(self, available: Sequence[int | Fraction], right_steps: Sequence[Step], left: int | Fraction, op: str,
             right: int | Fraction) -> str:
        """The model's line for one step, newline included."""
        if not self.compact:
            return oracle_step(available, right_steps, left, op, right) + "\n"
        done = " ".join(f"{_compact_number(s.left)}{s.op}{_compact_number(s.right)}={_compact_number(s.result)}"
                        for s in right_steps)
        pool = " ".join(_compact_number(v) for v in available)
        return f"{pool}|{done}|{_compact_number(left)}{op}{_compact_number(right)}\n"

    def reply(self, answer: OracleAnswer, left: int | Fraction, op: str, right: int | Fraction) -> str:
        """The solver's line answering one step, newline included."""
        if not self.compact:
            return f"Tool: {oracle_reply(answer, left, op, right)}\n"
        if answer.verdict == "GOOD":
            return "GOOD " + " ".join(_compact_number(v) for v in answer.available) + "\n"
        return {"BAD": "BAD\n", "END": "END\n"}.get(answer.verdict, "ERR\n")

    def unreadable(self) -> str:
        """The solver's line for a line that names no step."""
        return "ERR\n" if self.compact else "Tool: ERROR. No step to check: end the line with Try: <number> <op> <number>.\n"

    def parse_try(self, line: str) -> tuple[Fraction, str, Fraction] | None:
        """The step a model line tries, or None when the line names none."""
        if not self.compact:
            return parse_oracle_try(line)
        match = _COMPACT_TRY.search(line.strip())
        if match is None:
            return None
        left, op, right = match.groups()
        if not _readable(left, right):
            return None
        return _read_number(left), op, _read_number(right)

    def answer(self, expression: str) -> str:
        return f"<answer>{expression.replace(' ', '') if self.compact else expression}</answer>"

    def is_error(self, line: str) -> bool:
        """Whether a solver line rejects the step (unavailable number, division by zero, unreadable)."""
        return line == "ERR" if self.compact else line.startswith("Tool: ERROR.")


_PROBLEM_FULL = re.compile(r"Available: \[([^\]]*)\]\. Target: (-?\d+)\.")
_PROBLEM_COMPACT = re.compile(r"((?:\d+ )*\d+) -> (\d+)\s*$")


def parse_oracle_problem(prompt: str) -> tuple[list[int], int] | None:
    """(numbers, target) from an oracle prompt (`oracle_messages` rendered, or the compact one)."""
    match = _PROBLEM_FULL.search(prompt)
    if match:
        return [int(x) for x in match.group(1).split(",") if x.strip()], int(match.group(2))
    match = _PROBLEM_COMPACT.search(prompt)
    if match:
        return [int(x) for x in match.group(1).split()], int(match.group(2))
    return None
