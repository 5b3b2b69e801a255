"""Hostile model output for the verifier and the calculator: a seeded generator for fuzz tests and
the bench (`tests/test_verifier_fuzz.py`, `bench/bench_hostile.py`).

Kinds (each a function of a `random.Random`, a problem's numbers and target, and a size budget):
long numbers (up to 10,000 digits, where Python's int/str conversion stops at 4,300), unicode
digits and whitespace, deep nesting, huge products and quotients of long numbers, floods of
answer tags (closed, unclosed, one per line, alternating), megabytes of text, and random mixes
of the pieces a completion is made of. `hostile_inputs(n, seed)` yields (kind, text) pairs, the
texts as a model would write them (a completion, without the prompt).
"""

from __future__ import annotations

import random
from typing import Iterator

from ablate.registry import Registry

MB = 1_000_000
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩۰۱۲۳۴۵۶۷۸۹०१२३४५६७८९０１２３４５６７８９𝟎𝟏𝟐𝟑"
ODD_SPACE = ["\u00a0", "\u2003", "\u3000", "\r", "\v", "\x0b", "\x1c", "\u2028", "\ufeff", "\x00"]
_PIECES = ["<answer>", "</answer>", "\n", " ", "(", ")", "+", "-", "*", "/", "**", "//", ".", "Assistant:",
           "<calc>", "</calc>", "<result>", "</result>", "<think>", "</think>", "44", "19", "35", "98", "0", "07",
           "1e5", "1_0", "x", "=", "٣", "\t", "\f"]


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(min(n, 64)))[:n - 1] + \
        "7" * max(0, n - 65)


def _answer(body: str) -> str:
    return f"<answer>{body}</answer>"


# kind -> (a random.Random, a problem's numbers, its target, a size budget) -> a hostile completion
KINDS = Registry("kind", attr="__name__")


@KINDS.register
def long_number(rng, numbers, target, budget):
    size = rng.choice([101, 1000, 4300, 4301, 5000, 10_000, rng.randint(1, 20_000)])
    big = _digits(rng, size)
    body = rng.choice([big, f"{big} + {numbers[0]}", "0" * size, "0" * size + "1", f"{big}.5",
                       " + ".join(map(str, numbers)) + f" - {big} + {big}", f"({big}) / ({big})"])
    return _answer(body)


@KINDS.register
def unicode_digits(rng, numbers, target, budget):
    def uni(n):
        return "".join(rng.choice(UNICODE_DIGITS) if rng.random() < 0.5 else c for c in str(n))
    sep = rng.choice([" + ", "+", f" {rng.choice(ODD_SPACE)}+ ", "＋", " − "])
    body = sep.join(uni(n) for n in numbers)
    if rng.random() < 0.3:
        body = uni(int(_digits(rng, rng.randint(1, 30)))) * rng.randint(1, 2000)
    return _answer(body)


@KINDS.register
def deep_nesting(rng, numbers, target, budget):
    depth = rng.choice([199, 200, 201, 1000, rng.randint(1, max(1, budget // 3))])
    inner = " + ".join(map(str, numbers))
    shape = rng.random()
    if shape < 0.4:
        body = "(" * depth + inner + ")" * depth
    elif shape < 0.7:
        body = "(" * depth + inner  # unbalanced
    else:
        body = "-(" * depth + inner + ")" * depth
    return _answer(body)


@KINDS.register
def huge_product(rng, numbers, target, budget):
    size = rng.choice([1, 9, 99, 100, 101, 500, 4000])
    factors = min(rng.choice([2, 10, 50, 300, 1000, 5000]), max(2, budget // (size + 3)))
    op = rng.choice(["*", "/", "*", "+", "-"])
    return _answer(f" {op} ".join([_digits(rng, size)] * factors))


@KINDS.register
def tag_flood(rng, numbers, target, budget):
    reps = max(1, rng.randint(1, budget) // 20)
    unit = rng.choice(["<answer>1</answer>", "<answer>1</answer>\n", "<answer>\n</answer>\n", "<answer>",
                       "</answer>", "</answer>\n", "</answer><answer>", "</answer>a", ">x", "<answer>x",
                       "<answer>" + " + ".join(map(str, numbers)) + "</answer>"])
    text = unit * reps
    return rng.choice([text, text + _answer(" + ".join(map(str, numbers))), _answer("1") + "\n" + text,
                       text + "\n</answer>"])


@KINDS.register
def megabytes(rng, numbers, target, budget):
    size = rng.choice([MB, 2 * MB, 5 * MB]) if budget >= MB else budget
    fill = rng.choice(["x", " ", "\n", "1", "1 ", "1+", "(", ">", "٣", "<"])
    text = fill * (size // len(fill))
    where = rng.random()
    answer = _answer(" + ".join(map(str, numbers)))
    if where < 0.25:
        return answer + text
    if where < 0.5:
        return text + answer
    if where < 0.75:
        return "<answer>" + text + "</answer>"
    return text


@KINDS.register
def random_mix(rng, numbers, target, budget):
    pieces = _PIECES + [str(n) for n in numbers] + [str(target)]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))


@KINDS.register
def calculator_call(rng, numbers, target, budget):
    inner = rng.choice([huge_product, long_number, deep_nesting, unicode_digits, random_mix])(rng, numbers, target, budget)
    return inner.replace("<answer>", "").replace("</answer>", "")


def hostile_inputs(n: int, seed: int = 0, *, max_bytes: int = 5 * MB, big_every: int = 500, budget: int = 20_000
                   ) -> Iterator[tuple[str, str, list[int], int]]:
    """`n` (kind, text, numbers, target) tuples; one in `big_every` is megabytes long (up to
    `max_bytes`), the others are sized by `budget` (characters, roughly) so that thousands run in seconds."""
    rng = random.Random(seed)
    names = sorted(KINDS)
    for i in range(n):
        numbers = [rng.randint(1, 99) for _ in range(rng.choice([2, 3, 4, 5, 6]))]
        target = rng.randint(1, 99)
        big = i % big_every == 0
        kind = rng.choice(["megabytes", "tag_flood"]) if big else rng.choice(names)
        text = KINDS[kind](rng, numbers, target, max_bytes if big else budget)
        yield kind, text[:max_bytes], numbers, target
