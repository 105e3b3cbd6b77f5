"""Normalising a final answer and comparing it exactly, in the trainer process.

Everything here is bounded: inputs are capped in length, the regular expressions are linear (the
ones anchored at the end look at a bounded tail only), and no number with an exponent is ever
expanded (1e999999999 goes to the sandboxed symbolic worker, which has a time limit). Anything this
module cannot decide is left to that worker.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_ANSWER_CHARS = 300  # a final answer longer than this is not a final answer
_TAIL = 80  # trailing units and percent words are looked for in this many last characters

_WRAPPERS = [r"\left", r"\right", r"\displaystyle", r"\,", r"\!", r"\;", r"\:", r"\quad", "\\$", "$",
             "^{\\circ}", "^\\circ", "°", "\\degree", "€", "£"]
_WRAPPER = re.compile("|".join(re.escape(w) for w in _WRAPPERS))  # one pass, earlier ones first
_LATEX_SPACE = re.compile(r"(?<!\\)\\ ")  # `\ `, not the row break `\\` before a space
_GLUED_COMMA = re.compile(r",\\!\s*")  # `11,\! 111`: MATH's thousands separator, `\!` undoing the space
_TEXT = re.compile(r"\\(?:text|textbf|textit|textnormal|mathrm|mathbf|mbox)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_FRACTION = re.compile(r"^([+-]?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?$")
_SLASH = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
# `6 and 8`, `19, 46, and 82`: "and" lists every value (a list, compared as one); "or" offers a
# choice and stays a hedge. Applied to answers of at most MAX_ANSWER_CHARS, and to the trusted gold.
_AND = re.compile(r"\s*(?:,\s*)?\band\b\s*")
_LIST_WORDS = re.compile(r"\b(?:or|and)\b|\\(?:text\{\s*(?:or|and)\s*\}|lor|vee)")
# '1 2 3': several numbers, no operator between; not a subscript or exponent (`\log_2 8`)
_SPACED_NUMBERS = re.compile(r"(?<![_^\d])\d+\s+\d")
_PERCENT = re.compile(r"(?:\\%|%|\\text\{\s*(?:percentage|percent|pct)\s*\}|\b(?:percentage|percent|pct|per cent))\s*$", re.IGNORECASE)
# A unit is what follows a value: any `\text{...}` with a letter in it, or a known unit word.
_UNIT_WORDS = ("cm|mm|km|in|inch|inches|ft|feet|foot|yd|yards?|miles?|meters?|metres?|"
               "units?|square units|degrees?|hours?|hrs?|minutes?|mins?|seconds?|secs?|days?|weeks?|"
               "months?|years?|dollars?|cents?|pounds?|lbs?|kg|grams?|liters?|litres?|ml|mph|km/h|"
               "people|students|ways|cups|pages|inches squared|square feet|square inches|square meters")
# Never a number or "or"/"and" in a unit: `12 \text{ or 13}` is two answers, not 12 of something.
_UNIT = re.compile(r"(?<=[\w}).])\s*(?:\\(?:text|textbf|textit|mbox|mathrm|textnormal)\{(?![^{}]*\b(?:or|and)\b)"
                   r"([^{}\d]*[a-zA-Z][^{}\d]*)\}"
                   r"|\s(" + _UNIT_WORDS + r")\b\.?)(?:\^\{?[23]\}?)?\s*$", re.IGNORECASE)
_CHOICE = re.compile(r"^\(([A-E])\)$")
_LETTER = re.compile(r"[A-Za-z]")
_WORDS = re.compile(r"[A-Za-z][A-Za-z '\-]*")
_TWO_LETTERS = re.compile(r"[A-Za-z]{2}")
_LONE_SPACE = re.compile(r"(?<=\W) | (?=\W)")
_PLAIN = re.compile(r"[\d.,+\- /]*")
_INTEGER = re.compile(r"[+-]?\d{1,30}")


@dataclass(frozen=True)
class Normalised:
    text: str  # cleaned answer text
    percent: bool  # ended in a percent sign (or the word)
    unit: str = ""  # the unit stripped from its end, lower-cased ("" for none)


def _strip_tail(pattern: re.Pattern, s: str) -> tuple[str, re.Match | None]:
    """Remove what `pattern` (anchored at the end) matches in the last _TAIL characters."""
    head, tail = s[:-_TAIL], s[-_TAIL:]
    m = pattern.search(tail)
    return (head + tail[:m.start()], m) if m else (s, None)


def clean(answer: str) -> Normalised:
    """Strip LaTeX decoration, degrees, currency, a unit and a trailing full stop; note a percent
    sign or word. `(C)` becomes `C`. A label (`x = 5`) is left to the caller (rlvr.rewards.maths.forms)."""
    s = answer.strip()
    if _PLAIN.fullmatch(s):  # most answers: a number, nothing to strip (the checks-per-second path)
        return Normalised(s.removesuffix(".").strip(), False)
    if ",\\!" in s:
        s = _GLUED_COMMA.sub(",", s)
    s = _WRAPPER.sub("", s).strip().removesuffix(".").strip()
    if "\\ " in s:
        s = _LATEX_SPACE.sub("", s)
    s, percent = _strip_tail(_PERCENT, s) if "%" in s or "p" in s or "P" in s else (s, None)
    s, unit_match = _strip_tail(_UNIT, s.strip())
    unit = ""
    if unit_match:
        unit = " ".join((unit_match.group(1) or unit_match.group(2)).lower().split())
    s = _TEXT.sub(lambda m: m.group(1), s)
    if "and" in s:
        s = _AND.sub(", ", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\cfrac", "\\frac")
    s = s.replace("−", "-").replace("{,}", ",")
    s = s.replace("∞", "\\infty").replace("+\\infty", "\\infty")
    s = s.strip().removesuffix(".").strip()
    if m := _CHOICE.match(s):
        s = m.group(1)
    return Normalised(s, percent is not None, unit)


def exact_value(s: str) -> Fraction | None:
    """Integers, decimals, thousands separators, a/b, \\frac{a}{b}, mixed numbers -> Fraction.
    A comma counts as a thousands separator only between groups of three digits, without spaces
    (`32, 349` is two numbers)."""
    s = s.strip()
    if _INTEGER.fullmatch(s):
        return Fraction(int(s))
    if len(s) > MAX_ANSWER_CHARS:  # int() refuses 4300 digits; such a number is the worker's
        return None
    if "frac" not in s and _LETTER.search(s):  # \sqrt{8}, 2x, 1e5: not a plain number
        return None
    if "," in s:
        if not _THOUSANDS.match(s):
            return None
        s = s.replace(",", "")
    if _SPACED_NUMBERS.search(s):  # `9 1 6` is three numbers, not 916
        return None
    s = s.replace(" ", "")
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


def squash(s: str) -> str:
    """Whitespace removed where it separates nothing (`2x + 1` is `2x+1`), one space kept between
    two letters or digits (`9 1 6` is not `916`)."""
    return _LONE_SPACE.sub("", " ".join(s.split()))


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


def is_words(s: str) -> bool:
    """A text answer ('No', 'Monday', 'even'): letters and spaces only, a word of two letters or
    more (a single letter is a variable, and x is not X)."""
    return _WORDS.fullmatch(s) is not None and _TWO_LETTERS.search(s) is not None


def looks_like_several(s: str) -> bool:
    """'1 or 2', '1, 2', '1; 2', '1 2': a list of candidates rather than one answer."""
    if _LIST_WORDS.search(s) or ";" in s or _SPACED_NUMBERS.search(s):
        return True
    return "," in s and not _THOUSANDS.match(s.strip())


def has_plus_minus(s: str) -> bool:
    return "\\pm" in s or "±" in s or "\\mp" in s
