"""Fuzz: hostile model output never raises and never takes long, in the verifier (judge,
compute_score, the reward variants) and the calculator; TinyZero's scoring agrees wherever it can
run. Inputs come from `ablate.tasks.countdown.hostile` (20k, seeded); `bench/bench_hostile.py` prints
the worst-case times on the same generator plus the crafted 5 MB shapes."""

from __future__ import annotations

import re
import time

import pytest

from ablate.config import load_group_config
from ablate.tasks.countdown.tools import Calculator
from ablate.tasks.countdown import VERDICTS, Reward, compute_score, judge
from ablate.tasks.countdown.arith import MAX_DIGITS, ArithmeticFormatError, evaluate, numbers_in
from ablate.tasks.countdown.hostile import hostile_inputs

# Generous: the bench's budget is 15 ms; this catches superlinear work (seconds) on a loaded machine.
BOUND_S = 0.5


def tinyzero_score(solution_str, ground_truth, format_score=0.1, score=1.0):
    """TinyZero's countdown reward as its source reads (try/except included), eval as the evaluator."""
    if "Assistant:" in solution_str:
        solution_str = solution_str.split("Assistant:", 1)[1]
    elif "<|im_start|>assistant" in solution_str:
        solution_str = solution_str.split("<|im_start|>assistant", 1)[1]
    else:
        return 0
    matches = list(re.finditer(r"<answer>(.*?)</answer>", solution_str.split("\n")[-1]))
    if not matches:
        return 0
    equation = matches[-1].group(1).strip()
    try:
        ok = sorted(int(n) for n in re.findall(r"\d+", equation)) == sorted(ground_truth["numbers"])
    except Exception:
        ok = False
    if not ok:
        return format_score
    try:
        if not re.match(r"^[\d+\-*/().\s]+$", equation):
            raise ValueError
        value = eval(equation, {"__builtins__": None}, {})  # test oracle only
    except Exception:
        return format_score
    return score if abs(value - ground_truth["target"]) < 1e-5 else format_score


def _tinyzero_comparable(text: str) -> bool:
    """Short texts outside the documented deliberate differences (`**`, `//`, whitespace other than
    space/tab/form feed inside the answer, the bounds on tokens and digits)."""
    if len(text) > 3000 or "**" in text or "//" in text:
        return False
    answer = text.rsplit("\n", 1)[-1]
    return not any(c.isspace() and c not in " \t\f" for c in answer) and not re.search(r"[0-9]{%d}" % (MAX_DIGITS + 1), answer)


def test_20k_hostile_inputs_never_raise_nor_hang():
    tinyzero = Reward.from_config(load_group_config("reward", "tinyzero"))
    partial = Reward.from_config(load_group_config("reward", "partial"))
    worst, compared, kinds = 0.0, 0, set()
    for kind, text, numbers, target in hostile_inputs(20_000, seed=1):
        kinds.add(kind)
        gt = {"numbers": numbers, "target": target}
        start = time.perf_counter()
        verdicts = {judge(text, numbers, target).verdict.value,
                    judge(text, numbers, target, last_line_only=True).verdict.value}
        score = compute_score("Assistant: " + text, gt)
        rewards = [tinyzero(text, numbers, target)[0], partial(text, numbers, target)[0]]
        result = Calculator.answer(text)
        elapsed = time.perf_counter() - start
        worst = max(worst, elapsed)
        assert verdicts <= set(VERDICTS) and score in (0, 0.1, 1.0), (kind, text[:200])
        assert all(isinstance(r, float) and 0 <= r <= 1 for r in rewards), (kind, text[:200])
        assert result.startswith("<result>") and result.endswith("</result>")
        assert elapsed < BOUND_S * 6, (kind, len(text), elapsed)
        if _tinyzero_comparable(text):
            compared += 1
            assert score == tinyzero_score("Assistant: " + text, gt), (kind, text)
    assert kinds == {"long_number", "unicode_digits", "deep_nesting", "huge_product", "tag_flood", "megabytes",
                     "random_mix", "calculator_call"}
    assert compared > 5000


@pytest.mark.parametrize("digits", [4300, 4301, 5000, 100_000])
def test_numbers_past_pythons_conversion_limit_score_like_tinyzero(digits):
    big = "7" * digits
    text = f"<answer>{big} + 19 + 35</answer>"
    assert judge(text, [44, 19, 35], 98).verdict.value == "bad_format"
    assert compute_score("Assistant: " + text, {"numbers": [44, 19, 35], "target": 98}) == 0.1
    assert Calculator.answer(f"{big}*2") == "<result>ERR</result>"
    with pytest.raises(ArithmeticFormatError):
        numbers_in(big)


def test_digit_bounds_are_documented_and_exact():
    assert evaluate("9" * MAX_DIGITS + "+1") == 10 ** MAX_DIGITS
    with pytest.raises(ArithmeticFormatError, match="digits"):
        evaluate("9" * (MAX_DIGITS + 1))
    with pytest.raises(ArithmeticFormatError, match="in all"):
        evaluate("*".join(["9" * 100] * 11))
    # a value of ~1,000 digits is exact, and the calculator shows it
    assert Calculator.answer("*".join(["9" * 100] * 10)) == f"<result>{(10 ** 100 - 1) ** 10}</result>"


@pytest.mark.parametrize("text", [
    "<answer>" + "*".join(["7" * 4000] * 300) + "</answer>",
    "<answer>" + "/".join(["7", "3"] * 500) + "</answer>",
    "<answer>1</answer>" * 280_000,
    "<answer>\n</answer>\n" * 260_000,
    "<answer>" + "7" * 5_000_000 + "</answer>",
])
def test_superlinear_shapes_are_fast(text):
    start = time.perf_counter()
    judge(text, [44, 19, 35], 98)
    compute_score("Assistant: " + text, {"numbers": [44, 19, 35], "target": 98})
    Calculator.answer(text)
    assert time.perf_counter() - start < BOUND_S


def test_partial_reward_of_a_huge_wrong_value_is_finite():
    partial = Reward.from_config(load_group_config("reward", "partial"))
    numbers = [9] * 200
    value, judgement = partial("<answer>" + "*".join(["9"] * 200) + "</answer>", numbers, 21)
    assert judgement.verdict.value == "wrong_value" and value == pytest.approx(0.1)


def test_oracle_steps_with_numbers_of_any_length_are_unreadable_not_errors():
    from ablate.tasks.countdown.prompts import OracleFormat, parse_oracle_try

    big = "7" * 5000
    assert parse_oracle_try(f"Available: [1, 2]. Right steps: []. Try: {big} + 1") is None
    assert OracleFormat(compact=True).parse_try(f"1 2||{big}+1") is None
    assert parse_oracle_try("Available: [1, 2]. Right steps: []. Try: 2 + 1") is not None
