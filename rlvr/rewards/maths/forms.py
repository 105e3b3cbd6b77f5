"""The shape of one final answer: a value, a sequence, a set, an interval, a union of them, a
matrix, an equation or an inequality. Pure text work on answers of at most MAX_ANSWER_CHARS; the
comparison of the pieces is rlvr.rewards.maths.accuracy's."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rlvr.rewards.maths.normalise import _THOUSANDS, MAX_ANSWER_CHARS, clean, decimal_comma, exact_value, squash

_INEQUALITIES = {"\\leq": "<=", "\\geq": ">=", "\\le": "<=", "\\ge": ">=", "\\lt": "<", "\\gt": ">",
                 "≤": "<=", "≥": ">=", "<=": "<=", ">=": ">=", "<": "<", ">": ">",
                 "\\neq": "!=", "\\ne": "!=", "≠": "!=", "!=": "!="}
_INEQ_TOKENS = sorted(_INEQUALITIES, key=len, reverse=True)
_SUB = r"(?:_\{?\w+\}?)?"
# What may stand left of `=` in a labelled answer: a name (`x`, `a_1`, `\theta`, `f(x)`, `P(2)`)
# or a tuple of names (`(p, q)`); never a number or an expression (`5 = 3` is a chain, not a label).
_NOT_LABELS = r"(?!(?:not|no|none|never|maybe|perhaps|possibly|probably|approx\w*|about|around|roughly|nearly|" \
              r"almost|wrong|false|incorrect|answer|final|is)\b)"   # `Answer: not = 12` has no label
_LABEL = re.compile(_NOT_LABELS + r"(?:[a-zA-Z]+" + _SUB + r"|\\(?!pi\b|infty\b)[a-zA-Z]+" + _SUB + r")(?:\([^()=]*\))?"
                    r"|\(\s*[a-zA-Z]" + _SUB + r"(?:\s*,\s*[a-zA-Z]" + _SUB + r")*\s*\)")
# A gold's label may be any name for the quantity asked (`|AB|`, `V_1:V_2`, `\frac{NO}{BO}`): no
# digit outside a subscript, no operator. Only the trusted gold gets this latitude (`2x + z = 1` keeps its 1).
_SUBSCRIPT = re.compile(r"_\{[^{}]*\}|_\w")
_GOLD_LABEL = re.compile(r"(?=.*[A-Za-z])[A-Za-z|:\\{}\s]+")
_MATRIX = re.compile(r"\\begin\{([pbBvV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}", re.DOTALL)
_STRUCTURE = re.compile(r"[,=<>≤≥≠]|\\(?:cup|in|le|ge|lt|gt|ne|begin)")
_VARIABLE = re.compile(r"[a-zA-Z]" + _SUB)


@dataclass(kw_only=True, frozen=True)
class Form:
    """kind: value | list | set | tuple | union | matrix | equation | inequality | chain.
    parts: the pieces as text (union: as Forms; matrix: rows of cells; inequality: sides, with
    `ops` between them). A tuple of two is also an interval: `brackets` holds its two ends."""
    kind: str
    parts: tuple = ()
    brackets: str = ""
    ops: tuple = ()


@lru_cache(maxsize=None)
def _tokens(seps: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(re.escape(t) for t in seps) + r"|[()\[\]{}]")


def split_top(s: str, seps) -> tuple[list[str], list[str]]:
    """Split `s` at every separator (longest first) outside brackets; (pieces, separators found).
    A LaTeX separator glued to more letters (`\\le` in `\\left`) is not one."""
    pieces, found, depth, start = [], [], 0, 0
    for m in _tokens(tuple(seps)).finditer(s):
        tok = m.group()
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
        elif depth == 0 and not (tok[0] == "\\" and s[m.end():m.end() + 1].isalpha()):
            pieces.append(s[start:m.start()])
            found.append(tok)
            start = m.end()
    pieces.append(s[start:])
    return [p.strip() for p in pieces], found


def _enclosed(s: str) -> bool:
    """Does the bracket opening `s` close only at its very end?"""
    depth = 0
    for i, ch in enumerate(s):
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if depth == 0:
            return i == len(s) - 1
    return False


def is_label(s: str) -> bool:
    return _LABEL.fullmatch(s.strip()) is not None


@lru_cache(maxsize=4096)  # golds recur (one per group); answers are at most MAX_ANSWER_CHARS
def parse_form(s: str) -> Form:
    """The shape of a cleaned answer (module docstring)."""
    s = s.strip()
    if not _STRUCTURE.search(s) and not s.startswith(("(", "[", "{", "\\{")):
        return Form(kind="value", parts=(s,))  # most answers: no separator, relation or bracket to look at
    if m := _MATRIX.fullmatch(s):
        rows = split_top(m.group(2), ["\\\\"])[0]
        cells = tuple(tuple(split_top(r, ["&"])[0]) for r in rows if r)
        return Form(kind="matrix", parts=cells, brackets="|" if m.group(1).startswith("v") else "")
    sides, ops = split_top(s, _INEQ_TOKENS)
    if ops:
        return Form(kind="inequality", parts=tuple(sides), ops=tuple(_INEQUALITIES[o] for o in ops))
    pieces = split_top(s, [","])[0] if s.count("=") > 1 else []
    if len(pieces) > 1 and all(_labelled(p) for p in pieces):  # `a_3 = 2, a_{37} = 19`: one value per name
        return Form(kind="list", parts=tuple(pieces))
    sides, eqs = split_top(s, ["\\in", "="])
    if len(sides) > 2 or (eqs and not all(sides)):
        return Form(kind="chain", parts=tuple(sides))
    if eqs:
        return Form(kind="equation", parts=tuple(sides), ops=tuple(eqs))
    parts = split_top(s, ["\\cup"])[0]
    if len(parts) > 1:
        return Form(kind="union", parts=tuple(parse_form(p) for p in parts))
    return _bracketed(s)


def _bracketed(s: str) -> Form:
    for open_, close in (("\\{", "\\}"), ("{", "}")):
        if s.startswith(open_) and s.endswith(close) and _enclosed(s[len(open_) - 1:]):
            items = split_top(s[len(open_):-len(close)], [","])[0]
            if open_ == "{" and len(items) == 1:  # a plain LaTeX group: `{5}` is 5
                return parse_form(items[0])
            return Form(kind="set", parts=tuple(items) if items != [""] else ())
    if s[:1] in "([" and s[-1:] in ")]" and _enclosed(s):
        items = split_top(s[1:-1], [","])[0]
        if len(items) > 1:
            return Form(kind="tuple", parts=tuple(items), brackets=s[0] + s[-1])
        if s[0] == "(" and _MATRIX.fullmatch(items[0]):   # `(\begin{pmatrix}...\end{pmatrix})`: the matrix
            return parse_form(items[0])
        return Form(kind="value", parts=(s,))
    if "," in s and not _THOUSANDS.match(s) and not decimal_comma(s) and len(items := split_top(s, [","])[0]) > 1:
        return Form(kind="list", parts=tuple(items))
    return Form(kind="value", parts=(s,))


def is_gold_label(s: str) -> bool:
    return _GOLD_LABEL.fullmatch(_SUBSCRIPT.sub("", s.strip())) is not None


def labelled_list(form: Form) -> bool:
    """`AB = 4, CD = 5`: a list whose every piece names its value."""
    return form.kind == "list" and all(_labelled(p) for p in form.parts)


def _labelled(piece: str) -> bool:
    sides, eqs = split_top(piece, ["="])
    return len(eqs) == 1 and all(sides) and (is_label(sides[0]) or is_gold_label(sides[0]))


def unlabel(form: Form, gold: bool = False) -> Form:
    """`x = 5`, `f(x) = 2x`, `(p, q) = (3, 2)`, `x \\in [2, 5)` -> the form of the right side;
    anything else unchanged. A gold also loses a wider label (is_gold_label)."""
    if form.kind == "equation" and (is_label(form.parts[0]) or gold and is_gold_label(form.parts[0])):
        return parse_form(form.parts[1])
    return form


def _bounded(side: str) -> bool:
    """What an inequality bounds: a variable or a name (`0 < f(x) < 1`)."""
    return _VARIABLE.fullmatch(side) is not None or is_label(side)


def as_interval(form: Form) -> Form | None:
    """`x > 5` -> (5, \\infty); `-2 < x \\le 3` -> (-2, 3]; None unless one variable or name is bounded."""
    sides, ops = list(form.parts), list(form.ops)
    if all(o.startswith(">") for o in ops):
        sides, ops = sides[::-1], [o.replace(">", "<") for o in ops[::-1]]
    if not all(o.startswith("<") for o in ops):
        return None
    if len(sides) == 3 and _bounded(sides[1]):
        low, high, left, right = sides[0], sides[2], ops[0], ops[1]
    elif len(sides) == 2 and _bounded(sides[1]):
        low, high, left, right = sides[0], "\\infty", ops[0], "<"
    elif len(sides) == 2 and _bounded(sides[0]):
        low, high, left, right = "-\\infty", sides[1], "<", ops[0]
    else:
        return None
    return Form(kind="tuple", parts=(low, high),
                brackets=("[" if left == "<=" else "(") + ("]" if right == "<=" else ")"))


_ABSOLUTE = re.compile(r"\|\s*([a-zA-Z](?:_\{?\w+\}?)?)\s*\|")


def as_abs_union(form: Form) -> Form | None:
    """`1 \\le |z| \\le 2` -> [-2, -1] \\cup [1, 2]; `|x| > 3` -> (-\\infty, -3) \\cup (3, \\infty): the
    intervals an inequality on one variable's absolute value describes, for a bound of 0 or more."""
    sides = list(form.parts)
    where = [i for i, side in enumerate(sides) if _ABSOLUTE.fullmatch(side)]
    if len(where) != 1:
        return None
    sides[where[0]] = _ABSOLUTE.fullmatch(sides[where[0]]).group(1)
    band = as_interval(Form(kind="inequality", parts=tuple(sides), ops=form.ops))
    if band is None:
        return None
    (low, high), (left, right) = band.parts, band.brackets
    if low == "-\\infty" and high != "\\infty":                  # |x| < b: (-b, b)
        return Form(kind="tuple", parts=(f"-{high}", high), brackets=("[" if right == "]" else "(") + right)
    if (v := exact_value(low)) is None or v < 0:
        return None
    flip = {"(": ")", "[": "]"}
    negative = Form(kind="tuple", parts=("-\\infty" if high == "\\infty" else f"-{high}", f"-{low}"),
                    brackets=("(" if high == "\\infty" else "[" if right == "]" else "(") + flip[left])
    return Form(kind="union", parts=(negative, Form(kind="tuple", parts=(low, high), brackets=left + right)))


def answer_parts(answer: str) -> tuple[str, str]:
    """(value key, unit) of a stated answer: the value of an exact number, else the cleaned text
    without whitespace, a set's elements sorted; a label is dropped (`x = 5` is 5), a percent sign
    kept. The unit is its canonical name, or the prose that followed the value (`~thousand`). An
    overlong answer (refused later in any case) is its own text, never parsed."""
    if len(answer) > MAX_ANSWER_CHARS:
        return answer, ""
    norm = clean(answer)
    text = norm.text
    form = parse_form(text) if "=" in text or "\\in" in text or "{" in text else None
    if form is not None and form.kind == "equation" and is_label(form.parts[0]):
        form = parse_form(text := form.parts[1])
    value = exact_value(text)
    if value is not None:
        key = str(value)
    elif form is not None and form.kind == "set":   # `{1, 2}` and `{2, 1}` are one answer
        key = "{" + ",".join(sorted(str(v) if (v := exact_value(p)) is not None else squash(p)
                                    for p in form.parts)) + "}"
    else:
        key = squash(text)
    return key + "%" if norm.percent else key, ("~" + norm.prose) if norm.prose else norm.unit


def answer_key(answer: str) -> str:
    """What two stated answers must share to count as one (answer_parts): value and unit."""
    key, unit = answer_parts(answer)
    return f"{key} {unit}" if unit else key


def one_answer(cands: list[str]) -> bool:
    """Do these stated answers state one answer? One value, and at most one unit among them (`12`
    and `12 cm` are one answer; `12 m` and `12 km`, or `12` and `12 thousand`, are two)."""
    if all(c == cands[0] for c in cands):   # the same text twice (a box and its line): one answer
        return True
    parts = {answer_parts(c) for c in cands}
    return len({k for k, _ in parts}) <= 1 and len({u for _, u in parts if u}) <= 1 \
        and (len(parts) == 1 or not any(u.startswith("~") for _, u in parts))
