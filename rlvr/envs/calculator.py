"""An exact calculator tool for model-written arithmetic, parsed by hand (never eval, ast or compile).

The model's text is untrusted: a hand-written tokenizer and recursive-descent parser accept only
numbers, + - * / // % ** ^ and parentheses, and every way to make the work large is bounded before
the work is done (length, nesting, exponent, digits). Arithmetic is exact (fractions.Fraction), so
"0.1+0.2" is "0.3" and "1/3" is "1/3", never a float's rounding.

Semantics are Python's: // floors, % takes the divisor's sign, ** binds tighter than unary minus
and is right-associative (-2**2 is -4, 2**3**2 is 512); ^ is power too, not xor, because that is
what a maths question means by it. Positions in error messages count from 1.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

from rlvr.envs.tools import ToolError

MAX_LENGTH = 200        # characters; also bounds the token count and so the parser's work
MAX_DEPTH = 20          # nested parentheses, signs and exponents: each level costs ~5 Python frames,
                        # so 20 stays far from the interpreter's recursion limit
MAX_EXPONENT = 64       # |exponent| of ** and ^
MAX_DIGITS = 100        # every value's numerator and denominator stay below 10**MAX_DIGITS
MAX_DECIMALS = 20       # a terminating result with more decimal places prints as a fraction
_LIMIT = 10 ** MAX_DIGITS
_TOKEN = re.compile(r"\s*(?:([0-9.]+)|(\*\*|//|[-+*/%^()]))")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_NUM = "number"


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers (like 12 or 1.5) with + - * / // % ** (or ^ for power) and
            parentheses, e.g. "(23*47 - 1) / 4".
    """
    if not isinstance(expression, str):
        raise ToolError("expression must be a string")
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"expression longer than {MAX_LENGTH} characters")
    tokens = tokenize(expression)
    if not tokens:
        raise ToolError("empty expression")
    value, i = _expr(tokens, 0, 0)
    if i < len(tokens):
        raise _unexpected(tokens[i])
    return format_number(value)


# ---- tokens ------------------------------------------------------------------------------------

def tokenize(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, 1-based position) triples; kind is "number" or the operator itself. Numbers
    keep their text until parsed, so a malformed one is reported as written."""
    tokens, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            if text[i:].strip() == "":
                break
            j = len(text) - len(text[i:].lstrip())
            raise _bad_char(text, j)
        number, op = m.group(1), m.group(2)
        start = m.start(1) if number else m.start(2)
        tokens.append((_NUM, number, start + 1) if number else (op, op, start + 1))
        i = m.end()
    return tokens


def _bad_char(text: str, j: int) -> ToolError:
    if text[j] == ",":   # "1,000": guessing whether it is a thousands separator or a list is worse
        return ToolError(f"unexpected ',' at position {j + 1}: commas are not allowed "
                         "(write 1000, not 1,000)")
    return ToolError(f"unexpected character {text[j]!r} at position {j + 1}")


def _unexpected(token: tuple[str, str, int]) -> ToolError:
    kind, text, pos = token
    what = f"number {text}" if kind == _NUM else repr(text)
    return ToolError(f"unexpected {what} at position {pos}")


def _number(token: tuple[str, str, int]) -> Fraction:
    _, text, pos = token
    if not _NUMBER.fullmatch(text):
        raise ToolError(f"malformed number {text!r} at position {pos}")
    value = Fraction(text)
    if abs(value.numerator) >= _LIMIT or value.denominator >= _LIMIT:
        raise ToolError(f"number at position {pos} has more than {MAX_DIGITS} digits")
    return value


# ---- grammar -----------------------------------------------------------------------------------
# expr  := term (("+" | "-") term)*
# term  := unary (("*" | "/" | "//" | "%") unary)*
# unary := ("+" | "-") unary | power
# power := atom (("**" | "^") unary)?         right-associative; the exponent may carry a sign
# atom  := number | "(" expr ")"
# Each function takes the token list, the index to start at and the nesting depth, and returns
# (value, next index).

def _peek(tokens: list, i: int) -> str | None:
    return tokens[i][0] if i < len(tokens) else None


def _expr(tokens: list, i: int, depth: int) -> tuple[Fraction, int]:
    value, i = _term(tokens, i, depth)
    while _peek(tokens, i) in ("+", "-"):
        op = tokens[i][0]
        right, i = _term(tokens, i + 1, depth)
        value = _checked(value + right if op == "+" else value - right)
    return value, i


def _term(tokens: list, i: int, depth: int) -> tuple[Fraction, int]:
    value, i = _unary(tokens, i, depth)
    while _peek(tokens, i) in ("*", "/", "//", "%"):
        op = tokens[i][0]
        right, i = _unary(tokens, i + 1, depth)
        value = _checked(_apply(op, value, right))
    return value, i


def _unary(tokens: list, i: int, depth: int) -> tuple[Fraction, int]:
    if depth > MAX_DEPTH:
        raise ToolError(f"expression nested deeper than {MAX_DEPTH} levels")
    if _peek(tokens, i) in ("+", "-"):
        sign = tokens[i][0]
        value, i = _unary(tokens, i + 1, depth + 1)
        return (-value if sign == "-" else value), i
    return _power(tokens, i, depth)


def _power(tokens: list, i: int, depth: int) -> tuple[Fraction, int]:
    base, i = _atom(tokens, i, depth)
    if _peek(tokens, i) in ("**", "^"):
        exponent, i = _unary(tokens, i + 1, depth + 1)
        return power(base, exponent), i
    return base, i


def _atom(tokens: list, i: int, depth: int) -> tuple[Fraction, int]:
    if i >= len(tokens):
        raise ToolError("unexpected end of expression")
    kind = tokens[i][0]
    if kind == _NUM:
        return _number(tokens[i]), i + 1
    if kind != "(":
        raise _unexpected(tokens[i])
    value, j = _expr(tokens, i + 1, depth + 1)
    if _peek(tokens, j) != ")":
        if j >= len(tokens):
            raise ToolError(f"missing ')' for the '(' at position {tokens[i][2]}")
        raise _unexpected(tokens[j])
    return value, j + 1


# ---- arithmetic --------------------------------------------------------------------------------

def _apply(op: str, a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise ToolError("division by zero")
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    return a // b if op == "//" else a % b


def power(base: Fraction, exponent: Fraction) -> Fraction:
    """base ** exponent, exactly, refused before computing when the result would be too big.
    Fractional exponents are refused: their results are mostly irrational, so not exact."""
    if exponent.denominator != 1:
        raise ToolError(f"exponent must be a whole number, got {format_number(exponent)}")
    e = int(exponent)
    if abs(e) > MAX_EXPONENT:
        raise ToolError(f"exponent {e} is too large (the limit is {MAX_EXPONENT})")
    if base == 0:
        if e < 0:
            raise ToolError("division by zero")
        return Fraction(0 ** e)
    # Values are < 10**MAX_DIGITS, so log10 is finite; the +1 leaves the exact check below to decide
    # the borderline cases, while anything clearly too large is never computed.
    size = abs(e) * max(math.log10(abs(base.numerator)), math.log10(base.denominator))
    if size > MAX_DIGITS + 1:
        raise ToolError(f"result too large (more than {MAX_DIGITS} digits)")
    return _checked(base ** e)


def _checked(value: Fraction) -> Fraction:
    """Every value stays small enough that the next operation on it is cheap."""
    if abs(value.numerator) >= _LIMIT or value.denominator >= _LIMIT:
        raise ToolError(f"result too large (more than {MAX_DIGITS} digits)")
    return value


def format_number(value: Fraction) -> str:
    """An integer as "391"; a fraction whose decimal expansion ends within MAX_DECIMALS places as
    the exact decimal "0.25"; any other as "1/3" (exact, unlike a rounded decimal)."""
    if value.denominator == 1:
        return str(value.numerator)
    places = _decimal_places(value.denominator)
    if places is None or places > MAX_DECIMALS:
        return f"{value.numerator}/{value.denominator}"
    scaled = abs(value.numerator) * 10 ** places // value.denominator
    whole, frac = divmod(scaled, 10 ** places)
    return f"{'-' if value < 0 else ''}{whole}.{frac:0{places}d}"


def _decimal_places(denominator: int) -> int | None:
    """How many decimal places 1/denominator needs: max(a, b) for 2**a * 5**b, None when the
    denominator has another prime factor (the expansion never ends)."""
    counts = []
    for p in (2, 5):
        n = 0
        while denominator % p == 0:
            denominator //= p
            n += 1
        counts.append(n)
    return max(counts) if denominator == 1 else None
