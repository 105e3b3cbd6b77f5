"""Normalising a final answer and comparing it exactly, in the trainer process.

Everything here is bounded: inputs are capped in length, the regular expressions are linear, and
no number with an exponent is ever expanded (1e999999999 goes to the sandboxed symbolic worker,
which has a time limit). Anything this module cannot decide is left to that worker.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_ANSWER_CHARS = 300  # a final answer longer than this is not a final answer

_WRAPPERS = [r"\left", r"\right", r"\displaystyle", r"\,", r"\!", r"\;", r"\:", r"\quad", "$"]
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")
_ASSIGN = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?!=)")  # `x = 5`, `a_1 = 5`
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_FRACTION = re.compile(r"^([+-]?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?$")
_SLASH = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_LIST_WORDS = re.compile(r"\b(?:or|and)\b|\\(?:text\{\s*(?:or|and)\s*\}|lor|vee)")
_SPACED_NUMBERS = re.compile(r"\d\s+\d")  # '1 2 3': several numbers, no operator between
_SET = re.compile(r"^\\?\{(.*?)\\?\}$")
_INTERVAL = re.compile(r"^([\[(])(.*),(.*)([\])])$")


@dataclass(frozen=True)
class Normalised:
    text: str  # cleaned answer text
    percent: bool  # ended in a percent sign


def clean(answer: str) -> Normalised:
    """Strip LaTeX decoration, a leading `x =`, a trailing full stop; note a percent sign."""
    s = answer.strip()
    s = _TEXT.sub(lambda m: m.group(1), s)
    for w in _WRAPPERS:
        s = s.replace(w, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("−", "-")
    s = s.strip().removesuffix(".").strip()
    s = _ASSIGN.sub("", s, count=1).strip()
    percent = s.endswith("\\%") or s.endswith("%")
    if percent:
        s = s.removesuffix("\\%").removesuffix("%").strip()
    return Normalised(s, percent)


def exact_value(s: str) -> Fraction | None:
    """Integers, decimals, thousands separators, a/b, \\frac{a}{b}, mixed numbers -> Fraction."""
    s = s.replace(" ", "")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if _DECIMAL.match(s):
        return Fraction(s.rstrip(".") if not s.endswith(".") else s[:-1])
    if m := _FRACTION.match(s):
        sign, num, den = m.groups()
        return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign == "-" else 1)
    if m := _SLASH.match(s):
        num, den = m.groups()
        return None if int(den) == 0 else Fraction(int(num), int(den))
    if m := _MIXED.match(s):
        sign, whole, num, den = m.groups()
        if int(den) == 0:
            return None
        value = int(whole) + Fraction(int(num), int(den))
        return -value if sign == "-" else value
    return None


def decimal_places(s: str) -> int | None:
    """Digits after the point of a plain decimal ('3.14' -> 2); None if not a plain decimal."""
    s = s.replace(" ", "").replace(",", "")
    if not _DECIMAL.match(s) or "." not in s:
        return None
    return len(s.split(".", 1)[1])


def is_rounded_decimal(s: str) -> bool:
    """A gold like 3.14 or 0.333 (three or more significant digits after a point) is taken as rounded."""
    places = decimal_places(s)
    if not places:
        return False
    return len(s.replace(".", "").replace("-", "").replace("+", "").lstrip("0")) >= 3


def within_rounding(value: Fraction, gold_text: str) -> bool:
    """|value - gold| <= half a unit in the gold's last decimal place."""
    places = decimal_places(gold_text)
    return abs(value - Fraction(gold_text.replace(",", ""))) <= Fraction(1, 2 * 10 ** places)


def split_items(s: str) -> list[str] | None:
    """Top-level comma-separated items of a set `{a, b}`; None if `s` is not a set."""
    m = _SET.match(s)
    if not m:
        return None
    return [p.strip() for p in _split_top(m.group(1))]


def interval(s: str) -> tuple[str, str, str, str] | None:
    """('(', low, high, ']') for an interval like (0, 1]; None otherwise."""
    m = _INTERVAL.match(s)
    if not m or len(_split_top(m.group(2) + "," + m.group(3))) != 2:
        return None
    return m.group(1), m.group(2).strip(), m.group(3).strip(), m.group(4)


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def looks_like_several(s: str) -> bool:
    """'1 or 2', '1, 2', '1; 2', '\\pm 3': a list of candidates rather than one answer."""
    if _LIST_WORDS.search(s) or ";" in s or _SPACED_NUMBERS.search(s):
        return True
    if "," in s.replace(" ", "") and not _THOUSANDS.match(s.replace(" ", "")):
        return True
    return False


def has_plus_minus(s: str) -> bool:
    return "\\pm" in s or "±" in s or "\\mp" in s
