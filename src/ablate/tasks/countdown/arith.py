"""A bounded, safe evaluator for Countdown answer expressions (no `eval`).

Grammar (the arithmetic Python's `eval` would accept on TinyZero's allowed characters, minus
`**` and `//`, which are not Countdown arithmetic):

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/') unary)*
    unary  := ('+' | '-') unary | atom
    atom   := NUMBER | '(' expr ')'

Values are exact `Fraction`s. Anything else raises `ArithmeticFormatError`; division by zero
raises `ZeroDivisionError`. The work is bounded whatever the input (megabytes of text, 10k nested
parentheses, numbers of any length), so that hostile model output fails fast and never raises
anything else:

* MAX_TOKENS tokens and MAX_DEPTH nested parentheses (Python's own parser limit); evaluation uses
  explicit stacks, never recursion;
* MAX_DIGITS digits in one number literal and MAX_TOTAL_DIGITS in all literals together, checked
  while tokenizing, before any number is converted. Every intermediate value of `+ - * /` has at
  most as many digits as its operands together (plus one bit per operation), so these bounds keep
  every value of every step far below Python's 4,300-digit int/str conversion limit and keep
  evaluation linear: a longer literal is not Countdown arithmetic (`bad_format`; TinyZero scores
  such an answer `format_score` too, as its int() conversion fails or the numbers do not match).

Arithmetic runs on unreduced integer pairs (numerator, denominator): one gcd at the end, not one
per operation.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Python's own parser refuses more than 200 nested parentheses; matching it keeps parity with
# TinyZero's eval-based scorer on everything it can score.
MAX_DEPTH = 200
MAX_TOKENS = 2000
MAX_DIGITS = 100  # digits in one number literal (a Countdown number has 1 to 3)
MAX_TOTAL_DIGITS = 1000  # digits of all number literals of one expression together

# Whitespace is what Python reads inside an expression (space, tab, form feed); anything else
# that is not a number or an operator lands in the last group. `\Z` ends the scan on trailing
# whitespace without a search from every later position.
# A number matches at most MAX_DIGITS + 1 digits a side: a longer one is refused without reading it all.
_D = "[0-9]{1,%d}" % (MAX_DIGITS + 1)
_TOKEN = re.compile(r"[ \t\f]*(?:(%s(?:\.[0-9]{0,%d})?|\.%s)|(\*\*|//|[-+*/()])|(.)|\Z)" % (_D, MAX_DIGITS + 1, _D),
                    re.S)
_ASCII_INT = re.compile(_D)


class ArithmeticFormatError(ValueError):
    """The text is not an arithmetic expression this evaluator accepts."""


def numbers_in(expression: str, limit: int | None = None) -> list[int]:
    """Runs of ASCII digits, as TinyZero's validator counts them (`2.5` uses 2 and 5); with
    `limit`, stop after limit + 1 of them (enough to tell that there are too many). A run of more
    than MAX_DIGITS digits raises ArithmeticFormatError (it is never converted, nor read to its end)."""
    found = []
    for match in _ASCII_INT.finditer(expression):
        run = match.group()
        if len(run) > MAX_DIGITS:
            raise ArithmeticFormatError(f"a number of more than {MAX_DIGITS} digits")
        found.append(int(run))
        if limit is not None and len(found) > limit:
            break
    return found


def tokenize(expression: str, *, allow_decimals: bool = True) -> list[str]:
    """Numbers and operators; raises ArithmeticFormatError past MAX_TOKENS tokens, MAX_DIGITS
    digits in a number or MAX_TOTAL_DIGITS digits in all, without reading further."""
    tokens: list[str] = []
    digits = 0
    for match in _TOKEN.finditer(expression):
        number, operator, other = match.groups()
        if other is not None:
            raise ArithmeticFormatError(f"unexpected {other!r}")
        if operator is not None:
            if operator in ("**", "//"):
                raise ArithmeticFormatError(f"{operator!r} is not Countdown arithmetic")
            tokens.append(operator)
        elif number is not None:
            length = len(number)
            if "." in number:
                if not allow_decimals:
                    raise ArithmeticFormatError("decimal literals are not allowed")
                length -= 1
            elif len(number) > 1 and number[0] == "0" and number.strip("0"):
                # Python rejects `07`; keep parity with eval-based scorers.
                raise ArithmeticFormatError(f"leading zero in {number[:20]!r}")
            if length > MAX_DIGITS:
                raise ArithmeticFormatError(f"a number of more than {MAX_DIGITS} digits")
            digits += length
            if digits > MAX_TOTAL_DIGITS:
                raise ArithmeticFormatError(f"more than {MAX_TOTAL_DIGITS} digits in all")
            tokens.append(number)
        else:
            break  # end of text
        if len(tokens) > MAX_TOKENS:
            raise ArithmeticFormatError("expression too long")
    if not tokens:
        raise ArithmeticFormatError("empty expression")
    return tokens


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3, "pos": 3}


def _literal(token: str) -> tuple[int, int]:
    if "." not in token:
        return int(token), 1
    whole, fraction = token.split(".")
    return int((whole + fraction) or "0"), 10 ** len(fraction)


def _apply(operator: str, values: list[tuple[int, int]]) -> None:
    # values are (numerator, denominator) pairs, denominator > 0, not reduced
    if operator == "neg":
        n, d = values[-1]
        values[-1] = (-n, d)
    elif operator == "pos":
        pass
    else:
        rn, rd = values.pop()
        ln, ld = values.pop()
        if operator == "+":
            values.append((ln * rd + rn * ld, ld * rd))
        elif operator == "-":
            values.append((ln * rd - rn * ld, ld * rd))
        elif operator == "*":
            values.append((ln * rn, ld * rd))
        else:
            if rn == 0:
                raise ZeroDivisionError("division by zero")
            values.append((ln * rd, ld * rn) if rn > 0 else (-ln * rd, -ld * rn))


def _evaluate_tokens(tokens: list[str]) -> Fraction:
    # Shunting-yard with explicit stacks: no recursion, so nesting depth can't hit Python's limit.
    values: list[tuple[int, int]] = []
    operators: list[str] = []
    depth = 0
    expect_operand = True
    for token in tokens:
        if expect_operand:
            if token == "(":
                depth += 1
                if depth > MAX_DEPTH:
                    raise ArithmeticFormatError("too many nested parentheses")
                operators.append(token)
            elif token in ("+", "-"):
                operators.append("pos" if token == "+" else "neg")
            elif token[0].isdigit() or token[0] == ".":
                values.append(_literal(token))
                expect_operand = False
            else:
                raise ArithmeticFormatError(f"unexpected {token!r}")
        elif token == ")":
            while operators and operators[-1] != "(":
                _apply(operators.pop(), values)
            if not operators:
                raise ArithmeticFormatError("unbalanced parentheses")
            operators.pop()
            depth -= 1
        elif token in ("+", "-", "*", "/"):
            while operators and operators[-1] != "(" and _PRECEDENCE[operators[-1]] >= _PRECEDENCE[token]:
                _apply(operators.pop(), values)
            operators.append(token)
            expect_operand = True
        else:
            raise ArithmeticFormatError(f"unexpected {token!r}")
    if expect_operand:
        raise ArithmeticFormatError("unexpected end of expression")
    while operators:
        operator = operators.pop()
        if operator == "(":
            raise ArithmeticFormatError("unbalanced parentheses")
        _apply(operator, values)
    numerator, denominator = values[0]
    return Fraction(numerator, denominator)


def evaluate(expression: str, *, allow_decimals: bool = True) -> Fraction:
    """Exact value of `expression`; raises ArithmeticFormatError or ZeroDivisionError."""
    return _evaluate_tokens(tokenize(expression, allow_decimals=allow_decimals))


def format_number(value: Fraction) -> str:
    """`63`, `-4`, `7/2`: how results are shown to the model (calculator, oracle)."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
