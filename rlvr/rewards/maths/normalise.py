"""Normalising a final answer and comparing it exactly, in the trainer process.

Everything here is bounded: inputs are capped in length, the regular expressions are linear (the
ones anchored at the end look at a bounded tail only), and no number with an exponent is ever
expanded (1e999999999 goes to the sandboxed symbolic worker, which has a time limit). Anything this
module cannot decide is left to that worker.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

from rlvr.rewards.maths.units import Unit, read_unit, sign_unit

MAX_ANSWER_CHARS = 300  # a final answer longer than this is not a final answer
MAX_EXPONENT = 100_000  # an answer with a larger exponent (a power tower, 1e999999999) is refused unread
_TAIL = 80  # trailing units and percent words are looked for in this many last characters

_WRAPPERS = [r"\left", r"\right", r"\displaystyle", r"\!", "$"]
_WRAPPER = re.compile("|".join(re.escape(w) for w in _WRAPPERS))  # one pass, earlier ones first
# Spacing renders as space: `1\quad 2` and `1\ 2` are two numbers, never 12. A thin space between a
# digit and a group of three (`12\,345`) is a thousands separator.
_SPACING = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))|(?<!\\)\\(?:qquad|quad|,|;|:|>| )")
# Currency and degree signs are units (rlvr.rewards.maths.units), never dropped unread.
_SIGNS = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree|\\\$|€|£|¥|₹|¢")
# A reversed bracket opens or closes an interval the French way: `]0, 1[` is (0, 1).
_FRENCH = re.compile(r"(\\left)?([\[\]])([^\[\]{}]*,[^\[\]{}]*?)(\\right)?([\[\]])")
_GLUED_COMMA = re.compile(r",\\!\s*")  # `11,\! 111`: MATH's thousands separator, `\!` undoing the space
_TEXT = re.compile(r"\\(?:text|textbf|textit|textnormal|mathrm|mathbf|mbox)\{([^{}]*)\}")
# digits set in text mode are the same digits: `1\text{2}` is 12 (a blank inside keeps them apart)
_TEXT_DIGITS = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mbox)\s*\{(\d[\d.,]*)\}")
_THOUSANDS = re.compile(r"^[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$")   # never a leading `0,`
# `1 000 000`: groups of three after a space; `1000,99`, `0,111`, `2,74`: a decimal comma (one comma,
# two or more digits after it or a 0 before it, no thousands grouping). `1,2` stays a list.
_SPACE_THOUSANDS = re.compile(r"^[+-]?[1-9]\d{0,2}(?: \d{3})+(?:\.\d+)?$")
_DECIMAL_COMMA = re.compile(r"^[+-]?(?:\d+,\d{2,}|0,\d+)$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
# `\frac{12}{5}`, `\frac12`; without braces each argument is one digit, as LaTeX reads it (`\frac123` is not 12/3)
_FRACTION = re.compile(r"^([+-]?)\\[dt]?frac(?:\{(\d+)\}|\s*(\d))(?:\{(\d+)\}|\s*(\d))$")
_REPEATING = re.compile(r"^([+-]?)(\d*)\.(\d*)(?:\\overline\{(\d+)\}|\\dot\{(\d)\}|\((\d+)\))$")
_SLASH = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
# `6 and 8`, `19, 46, and 82`: "and" lists every value (a list, compared as one); "or" offers a
# choice and stays a hedge. Applied to answers of at most MAX_ANSWER_CHARS, and to the trusted gold.
_AND = re.compile(r"\s*(?:,\s*)?\band\b\s*")
_LIST_WORDS = re.compile(r"\b(?:or|and)\b|\\(?:text\{\s*(?:or|and)\s*\}|lor|vee)")
# '1 2 3': several numbers, no operator between; not a subscript or exponent (`\log_2 8`)
_SPACED_NUMBERS = re.compile(r"(?<![_^\d])\d+\s+\d")
_PERCENT = re.compile(r"(?:\\%|%|\\text\{\s*(?:percentage|percent|pct)\s*\}|\b(?:percentage|percent|pct|per cent))\s*$", re.IGNORECASE)
# What may end an answer after its value: a `\text{...}` (a unit or prose), plain words after a space,
# or a unit glued to a number (`12cm`); an exponent after it belongs to the unit (`\text{cm}^2`).
_POWER = r"(?:\s*\^\s*\{?\s*[23]\s*\}?|²|³)?"
_UNIT = re.compile(r"(?<=[\w}).\]])\s*\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathit)\s*\{([^{}]*)\}("
                   + _POWER + r")\s*$|(?<=[\d}).])\s+([A-Za-z][A-Za-z/ ]{0,29}?)(" + _POWER + r")\.?\s*$"
                   r"|(?<=\d)([a-z]{2,3})(" + _POWER + r")\s*$")
_MATH_WORDS = frozenset("pi sin cos tan cot sec csc log ln exp sqrt mod".split())
_CHOICE = re.compile(r"^\(([A-E])\)$")
_LETTER = re.compile(r"[A-Za-z]")
_WORDS = re.compile(r"[A-Za-z][A-Za-z '\-]*")
_TWO_LETTERS = re.compile(r"[A-Za-z]{2}")
_LONE_SPACE = re.compile(r"(?<=\W) | (?=\W)")
_PLAIN = re.compile(r"[\d.,+\- /]*")
_INTEGER = re.compile(r"[+-]?\d{1,30}")


class Normalised(NamedTuple):   # a NamedTuple: built for every answer checked, and cheaper than a dataclass
    text: str  # cleaned answer text
    percent: bool  # ended in a percent sign (or the word)
    unit: str = ""  # the canonical name of its unit ("" for none): "cm^2", "degree", "$"
    measure: Unit | None = None  # that unit's dimension and scale
    prose: str = ""  # words after the value that are no unit (`thousand`, `not sure`): no answer


def _strip_tail(pattern: re.Pattern, s: str) -> tuple[str, re.Match | None]:
    """Remove what `pattern` (anchored at the end) matches in the last _TAIL characters."""
    head, tail = s[:-_TAIL], s[-_TAIL:]
    m = pattern.search(tail)
    return (head + tail[:m.start()], m) if m else (s, None)


def _signs(s: str) -> tuple[str, list[Unit]]:
    """Currency and degree signs as units, removed from the text; a lone `$` before a number (an odd
    count of unescaped `$`: not a pair of math delimiters) is a dollar sign."""
    units = [sign_unit(_sign_name(m.group())) for m in _SIGNS.finditer(s)]
    s = _SIGNS.sub("", s) if units else s
    if s.count("$") % 2:
        units.append(sign_unit("$"))
    return s, units


def _sign_name(sign: str) -> str:
    return "°" if "circ" in sign else "\\$" if sign == "\\$" else sign


def _tail_unit(s: str) -> tuple[str, list[Unit], str]:
    """(text without its trailing unit, [that unit], prose that stood there instead of a unit)."""
    cut, m = _strip_tail(_UNIT, s)
    if m is None:
        return s, [], ""
    if m.group(1) is not None:   # `\text{...}`: a unit of the table, or prose
        words, power, prose = m.group(1), m.group(2), False
    elif m.group(3) is not None:
        words, power, prose = m.group(3), m.group(4), True
    else:
        words, power, prose = m.group(5), m.group(6), False
        if read_unit(words + power, prose) is None:
            return s, [], ""    # `2ab`: letters of the expression
    if not words.strip(" .,;:!?~\\"):
        return cut, [], ""      # `12\text{}`, `12\text{.}`: nothing
    unit = read_unit(words + power, prose)
    if unit is not None:
        return cut, [unit], ""
    if prose and (len(words.strip()) < 2 or words.strip().lower() in _MATH_WORDS):
        return s, [], ""        # `3 + 4 i`, `2 pi`: the expression itself
    return cut, [], words.strip()


def _may_end_in_unit(s: str) -> bool:
    """A cheap test before the unit pattern (checks per second): a letter or power sign at the end,
    or a text command anywhere."""
    end = s.rstrip()[-1:]
    return end.isalpha() or end in "²³." or "\\text" in s or "\\m" in s or (end.isdigit() and "^" in s[-12:])


def clean(answer: str) -> Normalised:
    """Strip LaTeX decoration and a trailing full stop; read a unit (currency and degree signs
    included, rlvr.rewards.maths.units) and note a percent sign or word. `(C)` becomes `C`. A label
    (`x = 5`) is left to the caller (rlvr.rewards.maths.forms)."""
    s = answer.strip()
    if _PLAIN.fullmatch(s):  # most answers: a number, nothing to strip (the checks-per-second path)
        return Normalised(s.removesuffix(".").strip(), False)
    if ",\\!" in s:
        s = _GLUED_COMMA.sub(",", s)
    if "{" in s and "\\" in s:
        s = _TEXT_DIGITS.sub(lambda m: m.group(1), s)
    s, units = _signs(s) if "$" in s or "circ" in s or "deg" in s or not s.isascii() else (s, [])
    if "\\" in s and ("\\," in s or "quad" in s or "\\ " in s or "\\;" in s or "\\:" in s or "\\>" in s):
        s = _SPACING.sub(lambda m: "" if m.group() == "\\," else " ", s)
    s = _WRAPPER.sub("", s).strip().removesuffix(".").strip()
    s, percent = _strip_tail(_PERCENT, s) if "%" in s or "p" in s or "P" in s else (s, None)
    s, tail, prose = _tail_unit(s.strip()) if _may_end_in_unit(s) else (s.strip(), [], "")
    units += tail
    names = {u.name for u in units}
    if len(names) > 1:   # `\$12 \text{ euros}`: two units for one value
        prose = prose or " and ".join(sorted(names))
    s = _TEXT.sub(lambda m: m.group(1), s)
    if "and" in s:
        s = _AND.sub(", ", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\cfrac", "\\frac")
    s = s.replace("−", "-").replace("{,}", ",")
    s = s.replace("∞", "\\infty").replace("+\\infty", "\\infty")
    if "[" in s or "]" in s:
        s = _FRENCH.sub(_french, s)
    s = s.strip().removesuffix(".").strip()
    if m := _CHOICE.match(s):
        s = m.group(1)
    unit = units[0] if len(names) == 1 else None
    return Normalised(s, percent is not None, unit.name if unit else "", unit, prose)


def _french(m: re.Match) -> str:
    """`]a, b[` -> `(a, b)`, `[a, b[` -> `[a, b)`; `[a, b]` as it is."""
    left, inner, right = m.group(2), m.group(3), m.group(5)
    return ("(" if left == "]" else "[") + inner + (")" if right == "[" else "]")


@lru_cache(maxsize=8192)   # one answer's text is read several times (its key, its value, its form), a gold per group
def exact_value(s: str) -> Fraction | None:
    """Integers, decimals, thousands separators, a/b, \\frac{a}{b}, mixed numbers -> Fraction.
    A comma counts as a thousands separator only between groups of three digits, without spaces
    (`32, 349` is two numbers)."""
    s = s.strip()
    if _INTEGER.fullmatch(s):
        return Fraction(int(s))
    if len(s) > MAX_ANSWER_CHARS:  # int() refuses 4300 digits; such a number is the worker's
        return None
    if "frac" not in s and "\\overline" not in s and "\\dot" not in s and _LETTER.search(s):  # \sqrt{8}, 2x, 1e5
        return None
    if "," in s:
        if _THOUSANDS.match(s):
            s = s.replace(",", "")
        elif decimal_comma(s):
            s = s.replace(",", ".")
        else:
            return None
    if _SPACED_NUMBERS.search(s):  # `9 1 6` is three numbers, not 916
        if not _SPACE_THOUSANDS.match(s):
            return None
        s = s.replace(" ", "")
    s = s.replace(" ", "")
    if _DECIMAL.match(s):
        return Fraction(s.rstrip(".") if not s.endswith(".") else s[:-1])
    if m := _FRACTION.match(s):
        sign, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
        return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign == "-" else 1)
    if m := _REPEATING.match(s):   # 0.\overline{3}, 0.1(6): the repeating decimal's exact fraction
        sign, whole, fixed, cycle = m.group(1), m.group(2) or "0", m.group(3), m.group(4) or m.group(5) or m.group(6)
        shift = 10 ** len(fixed)
        value = Fraction(int(whole + fixed), shift) + Fraction(int(cycle), (10 ** len(cycle) - 1) * shift)
        return -value if sign == "-" else value
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
    """A gold like 3.14 or 0.333 (three or more significant digits, a point, a last digit that is not
    0) is taken as rounded; 12.0 or 2.50 is an exact value as a float column writes it."""
    places = decimal_places(s)
    if not places or s.rstrip().endswith("0"):
        return False
    return len(s.replace(".", "").replace("-", "").replace("+", "").lstrip("0")) >= 3


def within_rounding(value: Fraction, gold_text: str) -> bool:
    """|value - gold| < half a unit in the gold's last decimal place: the value rounds to the gold
    (a tie, 2.255 for 2.25, rounds either way and is no rounding of it)."""
    places = decimal_places(gold_text)
    return abs(value - Fraction(gold_text.replace(",", ""))) < Fraction(1, 2 * 10 ** places)


def is_words(s: str) -> bool:
    """A text answer ('No', 'Monday', 'even'): letters and spaces only, a word of two letters or
    more (a single letter is a variable, and x is not X)."""
    return _WORDS.fullmatch(s) is not None and _TWO_LETTERS.search(s) is not None


def decimal_comma(s: str) -> bool:
    """`1000,99`, `0,111`: a comma that can only be a decimal point (never `12,345` nor `1,2`)."""
    s = s.strip()
    return _DECIMAL_COMMA.match(s) is not None and not _THOUSANDS.match(s)


def looks_like_several(s: str) -> bool:
    """'1 or 2', '1, 2', '1; 2', '1 2': a list of candidates rather than one answer."""
    if _LIST_WORDS.search(s) or ";" in s or (_SPACED_NUMBERS.search(s) and not _SPACE_THOUSANDS.match(s.strip())):
        return True
    return "," in s and not _THOUSANDS.match(s.strip()) and not decimal_comma(s)


def has_plus_minus(s: str) -> bool:
    return "\\pm" in s or "±" in s or "\\mp" in s


_FACTORIAL = re.compile(r"(\d{5,300})\s*!")
MAX_FACTORIAL = 10_000   # 99999999! is a tower of its own
_POWER_MARK = re.compile(r"\^|\*\*|(?<=\d)[eE](?=[+-]?\d)")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_POWER_CHAIN = re.compile(r"[+-]?\d+(?:\.\d+)?(?:\s*(?:\^|\*\*)\s*(?:[+-]?\d+(?:\.\d+)?|\{[^{}]*\}|\([^()]*\)))*")
_BASE = re.compile(r"\s*\(?\s*([+-]?\d+(?:\.\d+)?)\s*\)?\s*(?:\^|\*\*)")


def huge_power(s: str) -> bool:
    """Does any exponent in `s` exceed MAX_EXPONENT in value (`9^{9^{9^{9}}}`, `x^{10^{9}}`,
    `1e999999999`), or a factorial of more than MAX_FACTORIAL? Such a value costs sympy its whole time
    limit, so it is refused before symbolic
    work. Exponents that are no plain number or power of numbers are left to the worker."""
    if "!" in s and any(int(m.group(1)) > MAX_FACTORIAL for m in _FACTORIAL.finditer(s)):
        return True
    return any(abs(_exponent(s, m.end(), 0)) > MAX_EXPONENT for m in _POWER_MARK.finditer(s))


def _exponent(s: str, i: int, depth: int) -> float:
    """The value of the exponent argument starting at s[i]: a number, or a power of numbers
    (`{9^{9}}`), as a float (inf when it overflows); 0.0 when it is anything else."""
    arg = _argument(s, i).strip()
    if _NUMBER.fullmatch(arg):
        return float(arg)
    m = _BASE.match(arg)
    if m is None or depth > 20:
        return 0.0
    base, power = float(m.group(1)), _exponent(arg, m.end(), depth + 1)
    if abs(base) <= 1 or power <= 0:
        return 1.0
    return float("inf") if power * math.log10(abs(base)) > 300 else base ** power


def _argument(s: str, i: int) -> str:
    """What an exponent mark at s[i] applies to: a brace or parenthesis group, else a number or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] in "{(":
        opener, closer, depth = s[i], "})"["{(".index(s[i])], 0
        for j in range(i, len(s)):
            depth += 1 if s[j] == opener else -1 if s[j] == closer else 0
            if depth == 0:
                return s[i + 1:j]
        return s[i + 1:]
    # an unbraced exponent is the whole chain of powers after it (`2**10**10` and `2^2^2^...` associate right)
    m = _POWER_CHAIN.match(s, i)
    return m.group() if m else s[i:i + 1]
