"""Hardened maths answer checker: exactly one final answer, compared by value in its form.

Refused as hacks (score 0): several different final answers, lists of candidates ("1 or 2"),
\\pm unless the gold has it, chains of equations (`x = 5 = 3`) and equations whose left side is
not a label (`5 = 3`), an unclosed <think>, a set, list or interval for a single value, an
equation or inequality for a value, a percent when the gold has none, a unit other than the
gold's, and near misses: relative tolerance is used only when the gold itself is a rounded
decimal (3.14), and then only to half a unit in its last place.

Forms compared (rlvr.rewards.maths.forms): values (exact rationals first, then the symbolic worker),
tuples and intervals (in order, brackets equal), sets and bare lists (in any order, same count),
unions (parts in any order), matrices (same shape, cell by cell), equations (a labelled answer by
its value; two equations by the same left side, else as proportional equations), inequalities
(same relations, in either direction, up to a positive factor, or as the interval they describe),
lists of labelled values (`AB = 4, CD = 5`). The trusted gold is read more freely (answer.gold_answer,
mathforms.is_gold_label): its boxes, a wider label, `;` as separator, `\\pm a` as {-a, a}. Symbolic comparison runs
in a killable worker (rlvr.rewards.maths.worker), with one time budget for the whole answer.
"""
from __future__ import annotations

import re
import time
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

from rlvr.rewards.maths.answer import after_thinking, final_answers, gold_answer, loose_answers
from rlvr.rewards.base import Verdict, batch_form
from rlvr.rewards.workers import current
from rlvr.rewards.maths.forms import Form, as_abs_union, as_interval, labelled_list, one_answer, parse_form, unlabel
from rlvr.rewards.maths.normalise import (MAX_ANSWER_CHARS, MAX_EXPONENT, MAX_FACTORIAL, clean, decimal_places,
                                          exact_value, has_plus_minus, huge_power, is_rounded_decimal, is_words,
                                          looks_like_several, squash, within_rounding)
from rlvr.rewards.maths.units import same_quantity

_PLUS_MINUS = re.compile(r"\\pm\s*(.+)", re.DOTALL)
MAX_ITEMS = 32  # elements of one set, list, tuple or matrix

_RADIANS = re.compile(r"\\pi(?![a-zA-Z])|π")   # a gold in radians names pi


@lru_cache(maxsize=4096)  # a group's completions share one gold
def _clean_gold(gold: str):
    return clean(gold_answer(gold))


class _Budget(NamedTuple):
    """One answer's wall clock for the symbolic worker, however many pieces it compares:
    a budget per piece would let a many-element answer stall the trainer."""
    deadline: float
    symbolic: bool = True  # False: decide exactly or not at all (the cheap first pass over a set)

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _value_equal(a: str, g: str, budget: _Budget) -> tuple[bool, str]:
    """Two single values: exact rationals, then the same text (words in any case), then sympy."""
    if looks_like_several(a):  # unless the gold says the same words ("x < -2 or x > 2")
        same = looks_like_several(g) and squash(a) == squash(g)
        return same, "correct" if same else "a list of candidates, not one answer"
    av, gv = exact_value(a), exact_value(g)
    if av is not None and gv is not None:
        if av == gv:
            return True, "correct"
        # a rounded gold (3.14: mathnorm.is_rounded_decimal) takes an exact fraction, or a decimal at
        # least as precise, that rounds to it; never a coarser decimal (3.1)
        places = decimal_places(a)
        if is_rounded_decimal(g) and (places is None or places >= decimal_places(g)) and within_rounding(av, g):
            return True, "correct to the gold's rounding"
        if places and not is_rounded_decimal(g) and within_rounding(gv, a):
            return False, f"a rounded decimal for an exact gold: {a} for {g}"
        return False, f"wrong: {a} != {g}"
    if a == g or squash(a) == squash(g):
        return True, "correct"
    words = is_words(a), is_words(g)
    if any(words):
        equal = all(words) and a.casefold() == g.casefold()
        return equal, "correct" if equal else f"wrong: {a} != {g}"
    if not budget.symbolic:
        return False, "undecided without the symbolic checker"
    tol = str(Fraction(1, 2 * 10 ** decimal_places(g))) if is_rounded_decimal(g) else None
    equal, reason = current().maths.compare(a, g, tol, timeout_s=budget.left())
    return equal, ("correct (" + reason + ")") if equal else f"wrong: {reason}"


def _unordered(a_items: list, g_items: list, same, budget: _Budget) -> tuple[bool, str]:
    """Every element matched to one gold element, exact matches first, then symbolic ones."""
    a_items, g_items = _distinct(a_items), _distinct(g_items)   # a solution written twice is one solution
    if len(a_items) != len(g_items):
        return False, f"{len(a_items)} elements for a gold of {len(g_items)}"
    unmatched_a, unmatched_g = list(a_items), list(g_items)
    for b in (budget._replace(symbolic=False), budget):
        for item in list(unmatched_a):
            hit = next((g for g in unmatched_g if same(item, g, b)[0]), None)
            if hit is not None:
                unmatched_a.remove(item)
                unmatched_g.remove(hit)
    if unmatched_a:
        return False, f"element {unmatched_a[0]} is not in the gold"
    return True, "correct (same elements)"


def _distinct(items: list) -> list:
    """Items without a tuple written the same way twice (`(3, 2), (3,2)`: one solution); a repeated
    number stays (`1, 1` may state a double root)."""
    seen, out = set(), []
    for item in items:
        key = squash(item) if isinstance(item, str) and item.startswith("(") else None
        if key is None or key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _ordered(a_items, g_items, budget: _Budget) -> tuple[bool, str]:
    if len(a_items) != len(g_items):
        return False, f"{len(a_items)} entries for a gold of {len(g_items)}"
    for x, y in zip(a_items, g_items):
        equal, reason = _equal(x, y, budget)
        if not equal:
            return False, f"entry {x} differs: {reason}"
    return True, "correct (same entries)"


def _equation_equal(a: Form, g: Form, budget: _Budget) -> tuple[bool, str]:
    """Same left side: compare the right sides. Otherwise two equations are equal when one's
    `left - right` is a nonzero constant times the other's (x - 2y = 1 and 2x - 4y - 2 = 0)."""
    if a.ops != g.ops:
        return False, "not the same relation"
    (la, ra), (lg, rg) = a.parts, g.parts
    if squash(la) == squash(lg):
        return _equal(ra, rg, budget)
    if a.ops != ("=",) or not budget.symbolic:
        return False, "not the same equation"
    equal, reason = current().maths.compare(f"({la})-({ra})", f"({lg})-({rg})", None, "proportional", budget.left())
    return equal, ("correct (" + reason + ")") if equal else f"wrong: {reason}"


def _upward(f: Form) -> Form:
    """`a > b > c` as `c < b < a`: one direction, so that `x > 5` equals `5 < x`."""
    if f.ops and all(o.startswith(">") for o in f.ops):
        return Form(kind=f.kind, parts=f.parts[::-1], ops=tuple(o.replace(">", "<") for o in f.ops[::-1]))
    return f


def _form_mismatch(a: Form, g: Form) -> str:
    if g.kind == "value":
        if a.kind in ("equation", "inequality"):
            return f"an {a.kind}, not a value"
        return "a list of candidates, not one answer" if a.kind == "list" else "a set or interval for a single gold value"
    return f"a {a.kind} for a gold {g.kind}"


def _forms_equal(a: Form, g: Form, budget: _Budget) -> tuple[bool, str]:
    if a.kind == "inequality" and g.kind == "tuple" and _interval(g):
        a = as_interval(a) or a
    if g.kind == "inequality" and a.kind == "tuple":
        g = as_abs_union(g) or as_interval(g) or g
    if g.kind == "inequality" and a.kind == "union":
        g = as_abs_union(g) or g
    if max(len(a.parts), len(g.parts)) > MAX_ITEMS:
        return False, f"more than {MAX_ITEMS} elements"
    if {a.kind, g.kind} <= {"set", "list"}:
        if labelled_list(a) != labelled_list(g):  # `4, 5` for `AB = 4, CD = 5`: the order names them
            return _ordered(a.parts, g.parts, budget)
        return _unordered(a.parts, g.parts, _equal, budget)
    if a.kind != g.kind:
        return False, _form_mismatch(a, g)
    if a.kind == "value":
        return _value_equal(a.parts[0], g.parts[0], budget)
    if a.kind == "union":
        return _unordered(a.parts, g.parts, _forms_equal, budget)
    if a.kind == "equation":
        return _equation_equal(a, g, budget)
    if a.brackets != g.brackets:
        return False, f"brackets {a.brackets} for a gold with {g.brackets}"
    if a.kind == "matrix":
        if [len(r) for r in a.parts] != [len(r) for r in g.parts]:
            return False, "not the same shape"
        return _ordered([c for r in a.parts for c in r], [c for r in g.parts for c in r], budget)
    if a.kind == "inequality":
        return _inequality_equal(_upward(a), _upward(g), budget)
    return _ordered(a.parts, g.parts, budget)


def _interval(g: Form) -> bool:
    """Is a gold pair an interval for certain? `(3, 5)` may be a point; `[3, 5)` and `(3, \\infty)` are not."""
    return len(g.parts) == 2 and (g.brackets != "()" or any("infty" in p for p in g.parts))


def _inequality_equal(a: Form, g: Form, budget: _Budget) -> tuple[bool, str]:
    """Same relations between equal sides; or, for one relation, `right - left` a positive constant
    times the gold's (`-x > -1` is `x < 1`; `x > 1` is not). `!=` is symmetric (`12 \\neq x`)."""
    if a.ops != g.ops:
        return False, "not the same inequality"
    if a.ops == ("!=",):
        return _unordered(list(a.parts), list(g.parts), _equal, budget)
    equal, reason = _ordered(a.parts, g.parts, budget)
    if equal or len(a.ops) != 1 or not budget.symbolic:
        return equal, reason
    (la, ra), (lg, rg) = a.parts, g.parts
    equal, reason = current().maths.compare(f"({ra})-({la})", f"({rg})-({lg})", None, "positive", budget.left())
    return equal, ("correct (" + reason + ")") if equal else f"wrong: {reason}"


def _equal(a: str, g: str, budget: _Budget) -> tuple[bool, str]:
    """Is the answer text equal to the gold text, whatever their form?"""
    if (av := exact_value(a)) is not None and (gv := exact_value(g)) is not None and av == gv:
        return True, "correct"  # the common case, without parsing forms
    fa, fg = parse_form(a), parse_form(g)
    if fa.kind == "chain" or fg.kind == "chain":
        return False, "a chain of equations, not one answer"
    if fg.kind != "equation":
        fa = unlabel(fa)
    if fa.kind != "equation":
        fg = unlabel(fg, gold=True)
    if fa.kind in ("set", "list") and fg.kind == "value" and (pm := _PLUS_MINUS.fullmatch(fg.parts[0])):
        fg = Form(kind="set", parts=(f"-({pm.group(1)})", pm.group(1)))  # a gold of \pm 2021 is the pair of them
    return _forms_equal(fa, fg, budget)


def check_answer(answer_text: str, gold_text: str) -> tuple[bool, str]:
    """Is one extracted final answer equal to the gold? (equal, reason)."""
    if len(answer_text) > MAX_ANSWER_CHARS:
        return False, f"final answer longer than {MAX_ANSWER_CHARS} characters"
    ans, gold = clean(answer_text), _clean_gold(str(gold_text))
    if not ans.text:
        return False, "empty final answer"
    if ans.prose and ans.prose.casefold() != gold.prose.casefold():   # the gold's own words are its unit
        return False, f"prose after the value, not a unit: {ans.prose[:40]!r}"
    if ans.percent and not gold.percent:
        return False, "percent answer for a gold without a percent sign"
    if ans.unit and gold.unit and ans.unit != gold.unit:
        a, g = exact_value(ans.text), exact_value(gold.text)
        if a is not None and g is not None and same_quantity(a, ans.measure, g, gold.measure):
            return True, f"correct (in {ans.unit} for a gold in {gold.unit})"
        return False, f"unit {ans.unit} for a gold in {gold.unit}"
    if ans.measure and ans.measure.dimension == "angle" and not gold.unit and _RADIANS.search(gold.text):
        # a gold that is a multiple of pi, with no unit, is in radians: pi/6 degrees is another angle
        return False, f"unit {ans.unit} for a gold in radians"
    if any(c in ans.text for c in "^eE*!") and huge_power(ans.text):
        return False, f"an exponent over {MAX_EXPONENT} or a factorial over {MAX_FACTORIAL}: too large to compare"
    if has_plus_minus(ans.text) and not has_plus_minus(gold.text):
        return False, "\\pm answer for a single gold value"
    budget = _Budget(time.monotonic() + current().maths.timeout_s)
    equal, reason = _equal(ans.text, gold.text, budget)
    if not equal and gold.percent and not ans.percent:  # 0.5 for a gold of 50%
        a, g = exact_value(ans.text), exact_value(gold.text)
        if a is not None and g is not None and a == g / 100:
            return True, "correct (the percentage as a fraction)"
    return equal, reason


def _same_answer(stated: str, final: str) -> bool:
    """Does a number stated beside the final answer (loose_answers) give the same answer?"""
    return one_answer([final, stated]) or check_answer(stated, final)[0]


def math_accuracy_verdict(completion: str, answer: str) -> Verdict:
    """1.0 when the completion states exactly one final answer and it equals the gold."""
    if after_thinking(completion) is None:
        return Verdict(0.0, "unclosed <think>")
    try:
        cands = final_answers(completion)
        if not cands:
            return Verdict(0.0, "no final answer")
        if len(cands) > 1 and not one_answer(cands):
            return Verdict(0.0, f"several different final answers: {cands[:4]}")
        stray = next((s for s in loose_answers(completion) if s != cands[0] and not _same_answer(s, cands[0])), None)
        if stray is not None:
            return Verdict(0.0, f"several different final answers: {[cands[0], stray]}")
        equal, reason = check_answer(cands[0], answer)
    except RecursionError:   # a bound on nesting, whatever form reached it: never an exception out of here
        return Verdict(0.0, "answer nested too deeply to read")
    return Verdict(1.0 if equal else 0.0, reason, cands[0][:MAX_ANSWER_CHARS])


math_accuracy = batch_form(math_accuracy_verdict, ("answer",), checks_correctness=True)
