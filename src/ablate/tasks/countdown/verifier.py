"""Scoring Countdown completions: TinyZero's reward, the toolkit's verdicts, and reward variants.

Two entry points:

* `compute_score(solution_str, ground_truth, ...)` scores like TinyZero's
  `verl/utils/reward_score/countdown.py` on the full text (prompt + completion): cut at the first
  `Assistant:` (else `<|im_start|>assistant`, else 0), keep the last line, take the last
  `<answer>...</answer>` there; no answer -> 0; numbers not exactly the given multiset, or not
  arithmetic -> `format_score`; value within 1e-5 of the target -> `score`; else `format_score`.
  Deliberate differences: `**` and `//` are not arithmetic (TinyZero's `eval` would compute
  them), values are exact rationals, and nothing is ever `eval`-ed.
* `judge(completion, numbers, target)` returns a `Judgement` with a verdict that metrics count:
  no_answer, bad_format, wrong_numbers, substitution_error (reaches the target but uses an
  intermediate result in place of the numbers that made it, paper 004), wrong_value, correct.
  It reads the last `<answer>` tag of the completion (of its last line with `last_line_only`,
  TinyZero's rule) and, unlike `compute_score`, refuses decimal literals: `2.5` would let a
  model glue the given numbers 2 and 5 together.

Both are total: any input (empty, megabytes, unicode, hostile nesting) gets a score, never an
exception, in time linear in the input.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Any, Mapping, Sequence

from ablate.config.schemas import typed

from .arith import ArithmeticFormatError, _evaluate_tokens, tokenize
from .schema import VerdictRewardConfig
from .solver import is_solvable

OPEN, CLOSE = "<answer>", "</answer>"


class Verdict(str, enum.Enum):
    NO_ANSWER = "no_answer"
    BAD_FORMAT = "bad_format"
    WRONG_NUMBERS = "wrong_numbers"
    SUBSTITUTION_ERROR = "substitution_error"
    WRONG_VALUE = "wrong_value"
    CORRECT = "correct"


VERDICTS = tuple(v.value for v in Verdict)
# The wrong answers solver preference pairs reject (`stage.pairs.solver.mix`, ablate/tasks/countdown/pairs.py),
# each checked there to have its verdict.
PAIR_KINDS = ("wrong_value", "wrong_numbers", "substitution")


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    answer: str | None = None  # the text inside the answer tags, stripped
    value: Fraction | None = None  # its exact value, when it is arithmetic


# In the text reversed: a reversed CLOSE, then (leftwards in the text) neither a newline nor another
# CLOSE, then an OPEN; possessive where Python has it, so a failed attempt never backtracks.
if sys.version_info >= (3, 11):
    _REVERSED_PAIR = re.compile(r">rewsna/<(?:[^\n>]++|>(?!rewsna/?<))*+>rewsna<")
else:  # pragma: no cover
    _REVERSED_PAIR = re.compile(r">rewsna/<[^\n>]*(?:>(?!rewsna/?<)[^\n>]*)*>rewsna<")


def _last_in_line(text: str, line: int, close: int) -> str | None:
    """The last match ending at or before the CLOSE at `close`, all in the line that starts at `line`
    (no newline in text[line:close]), with a few `find`s however many tags the line has: a match
    ends at the first CLOSE after its OPEN, so when an OPEN follows the CLOSE before `close`, the
    first such OPEN starts the last match; otherwise the last OPEN before that CLOSE lies in the last
    match, which ends at the first CLOSE after it and starts at the first OPEN after the CLOSE before."""
    previous = text.rfind(CLOSE, line, close)
    first = text.find(OPEN, previous + len(CLOSE) if previous >= 0 else line, close)
    if first < 0:
        if previous < 0:
            return None
        opening = text.rfind(OPEN, line, previous)
        if opening < 0:
            return None
        close = text.find(CLOSE, opening + len(OPEN))
        previous = text.rfind(CLOSE, line, close)
        first = text.find(OPEN, previous + len(CLOSE) if previous >= 0 else line, close)
    return text[first + len(OPEN):close].strip()


def last_answer(text: str, start: int = 0) -> str | None:
    """Content of the last `<answer>X</answer>` with no newline in X in `text[start:]`, as
    `re.finditer` over `<answer>(.*?)</answer>` would pick it, in linear time whatever the text
    (the regex is quadratic on text with many unclosed tags; a loop over matches is slow on
    megabytes of them): the line of the last CLOSE is looked at with `find`s; only when it holds no
    answer does a linear scan of the text before it, reversed, find the last line that does."""
    close = text.rfind(CLOSE, start)
    if close < 0:
        return None
    line = max(text.rfind("\n", start, close) + 1, start)
    found = _last_in_line(text, line, close)
    if found is not None or line == start or text.find(OPEN, start, line) < 0:
        return found
    reversed_head = text[line - 2:(start - 1 if start > 0 else None):-1]  # text[start:line - 1], reversed
    match = _REVERSED_PAIR.search(reversed_head)
    if match is None:
        return None
    close = line - 1 - match.start() - len(CLOSE)
    return _last_in_line(text, max(text.rfind("\n", start, close) + 1, start), close)


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return None


def _tinyzero_extract(solution_str: str) -> str | None:
    """TinyZero's answer: after the first assistant marker, on the last line, the last answer tag
    (positions only: no copy of a long text)."""
    for marker in ("Assistant:", "<|im_start|>assistant"):
        found = solution_str.find(marker)
        if found >= 0:
            start = found + len(marker)
            break
    else:
        return None
    return last_answer(solution_str, max(solution_str.rfind("\n", start) + 1, start))


def compute_score(solution_str: Any, ground_truth: Mapping[str, Any], method: str = "strict",
                  format_score: float = 0.1, score: float = 1.0) -> float:
    """TinyZero-compatible Countdown reward (`method` is accepted and ignored, as in TinyZero)."""
    text = _as_text(solution_str)
    equation = None if text is None else _tinyzero_extract(text)
    if equation is None:
        return 0
    try:
        numbers = sorted(int(n) for n in ground_truth["numbers"])
        target = Fraction(ground_truth["target"])
    except (KeyError, TypeError, ValueError):
        return format_score
    try:
        # Any failure scores format_score, whether of the numbers or of the arithmetic, so the order
        # of the checks does not change the score: tokenizing first stops at the first character
        # that is not arithmetic (or past the bounds) instead of reading megabytes for digits.
        tokens = tokenize(equation, allow_decimals=True)
        # TinyZero's numbers: every run of digits (`2.5` uses 2 and 5)
        used = sorted(int(run) for token in tokens if token[0] in "0123456789." for run in token.split(".") if run)
        if used != numbers:
            return format_score
        value = _evaluate_tokens(tokens)
        return score if abs(value - target) < Fraction(1, 100000) else format_score
    except (ArithmeticFormatError, ZeroDivisionError, TypeError, ValueError):
        return format_score


# An intermediate result stands for 2 or 3 given numbers: deciding that 4 or more make it takes the
# solver milliseconds to seconds per group (6 numbers: ~2 s), too slow for a reward.
MAX_SUBSTITUTED = 3


def _is_substitution(used: Counter, given: Counter) -> bool:
    """Could each number used but not given have been made from the given numbers left unused?

    The unused given numbers must split into one group of 2 to MAX_SUBSTITUTED numbers per extra
    number, each group reaching its extra with the exactly-once rule (`52 + 32 - 63` over [90, 63, 58, 52]: 32 = 90 - 58).
    """
    extras = list((used - given).elements())
    unused = list((given - used).elements())
    if not extras or not 2 * len(extras) <= len(unused) <= MAX_SUBSTITUTED * len(extras) or len(unused) > 8:
        return False
    for assignment in itertools.product(range(len(extras)), repeat=len(unused)):
        groups = [[unused[i] for i, g in enumerate(assignment) if g == k] for k in range(len(extras))]
        if all(2 <= len(group) <= MAX_SUBSTITUTED for group in groups) and all(
                is_solvable(group, extra) for group, extra in zip(groups, extras)):
            return True
    return False


def judge(completion: Any, numbers: Sequence[int], target: int, *, last_line_only: bool = False) -> Judgement:
    """The verdict on one completion (the model's response only, without the prompt)."""
    text = _as_text(completion)
    if text is None:
        return Judgement(Verdict.NO_ANSWER)
    answer = last_answer(text, text.rfind("\n") + 1 if last_line_only else 0)
    if answer is None:
        return Judgement(Verdict.NO_ANSWER)
    try:
        # Tokenizing bounds the work (tokens, digits per number and in all) before any number is
        # converted or any fraction computed; the evaluation then takes time linear in the tokens.
        tokens = tokenize(answer, allow_decimals=False)
        value = _evaluate_tokens(tokens)
    except ArithmeticFormatError:
        return Judgement(Verdict.BAD_FORMAT, answer)
    except ZeroDivisionError:
        value = None
    used = Counter(int(t) for t in tokens if t[0].isdigit())
    given = Counter(int(n) for n in numbers)
    if used != given:
        if value is not None and value == target and _is_substitution(used, given):
            return Judgement(Verdict.SUBSTITUTION_ERROR, answer, value)
        return Judgement(Verdict.WRONG_NUMBERS, answer, value)
    if value is None or value != target:
        return Judgement(Verdict.WRONG_VALUE, answer, value)
    return Judgement(Verdict.CORRECT, answer, value)


@dataclass(frozen=True)
class Reward:
    """A reward variant (`conf/reward/`): a value per verdict, plus optional credit for closeness.

    A `wrong_value` answer earns `values['wrong_value'] + distance_credit * max(0, 1 - |v - t| / |t|)`
    (|t| taken as at least 1), so answers nearer the target earn more.
    """

    name: str
    values: Mapping[str, float]
    distance_credit: float = 0.0
    last_line_only: bool = False

    def __post_init__(self) -> None:
        missing = sorted(set(VERDICTS) - set(self.values))
        unknown = sorted(set(self.values) - set(VERDICTS))
        if missing or unknown:
            raise ValueError(f"reward {self.name!r}: values must name exactly the verdicts {list(VERDICTS)}; "
                             f"missing {missing}, unknown {unknown}")
        for key, value in self.values.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reward {self.name!r}: values.{key} must be a finite number, got {value!r}")
        if not math.isfinite(self.distance_credit):
            raise ValueError(f"reward {self.name!r}: distance_credit must be finite")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | VerdictRewardConfig) -> "Reward":
        """The reward a `reward` config describes (composed, a plain dict or its schema's instance), read as its
        schema (ablate.tasks.countdown.schema.VerdictRewardConfig): keys left out take tinyzero's values."""
        known = {f.name for f in fields(VerdictRewardConfig)}
        unknown = sorted(set(cfg) - known) if not isinstance(cfg, VerdictRewardConfig) else []
        if unknown:
            raise ValueError(f"reward config: unknown keys {unknown}; expected {sorted(known)}")
        r = typed(VerdictRewardConfig, cfg)
        return cls(name=r.name, values=asdict(r.values), distance_credit=r.distance_credit,
                   last_line_only=r.last_line_only)

    def of(self, judgement: Judgement, target: int) -> float:
        reward = float(self.values[judgement.verdict.value])
        if judgement.verdict is Verdict.WRONG_VALUE and self.distance_credit and judgement.value is not None:
            # exact: a value of hundreds of digits has no float
            closeness = 1 - abs(judgement.value - target) / max(abs(Fraction(target)), 1)
            reward += self.distance_credit * float(max(Fraction(0), closeness))
        return reward

    def __call__(self, completion: Any, numbers: Sequence[int], target: int) -> tuple[float, Judgement]:
        judgement = judge(completion, numbers, target, last_line_only=self.last_line_only)
        return self.of(judgement, target), judgement
