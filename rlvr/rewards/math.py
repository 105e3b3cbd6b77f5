"""Hardened maths answer checker: exactly one final answer, compared exactly, then symbolically.

Refused as hacks (score 0): several different final answers, lists of candidates ("1 or 2"),
\\pm unless the gold has it, chains of equations (`5=3`), an unclosed <think>, sets or intervals
when the gold is a single value, a percent sign when the gold has none, and near misses: relative
tolerance is used only when the gold itself is a rounded decimal (3.14), and then only to half a
unit in its last place. Symbolic comparison runs in a killable worker (rlvr.rewards.math_worker).
"""
from __future__ import annotations

from fractions import Fraction

from rlvr.rewards.answer import after_thinking, final_answers
from rlvr.rewards.base import Verdict, batch_form
from rlvr.rewards.math_worker import shared_worker
from rlvr.rewards.mathnorm import (MAX_ANSWER_CHARS, Normalised, clean, decimal_places, exact_value,
                                   has_plus_minus, interval, is_rounded_decimal, looks_like_several,
                                   split_items, within_rounding)

MAX_SET_ITEMS = 10


def _scalar_equal(ans: Normalised, gold: Normalised) -> tuple[bool, str]:
    """Compare two single values: exact rationals first, the symbolic worker only if needed."""
    if ans.percent and not gold.percent:
        return False, "percent answer for a gold without a percent sign"
    a, g = exact_value(ans.text), exact_value(gold.text)
    if a is not None and g is not None:
        if a == g:
            return True, "correct"
        if is_rounded_decimal(gold.text) and (decimal_places(ans.text) or 0) >= decimal_places(gold.text) \
                and within_rounding(a, gold.text):
            return True, "correct to the gold's rounding"
        return False, f"wrong: {ans.text} != {gold.text}"
    if a is None and g is None and ans.text == gold.text:
        return True, "correct"
    tol = None
    if is_rounded_decimal(gold.text):
        tol = str(Fraction(1, 2 * 10 ** decimal_places(gold.text)))
    equal, reason = shared_worker().compare(ans.text, gold.text, tol)
    return equal, ("correct (" + reason + ")") if equal else f"wrong: {reason}"


def _collection_equal(ans: Normalised, gold: Normalised) -> tuple[bool, str] | None:
    """Sets (order-free) and intervals (brackets must match), only when the gold is one."""
    g_items = split_items(gold.text)
    if g_items is not None:
        a_items = split_items(ans.text)
        if a_items is None or len(a_items) != len(g_items) or len(a_items) > MAX_SET_ITEMS:
            return False, "not the same set"
        unmatched = list(g_items)
        for item in a_items:
            hit = next((g for g in unmatched
                        if _scalar_equal(Normalised(item, False), Normalised(g, False))[0]), None)
            if hit is None:
                return False, f"set element {item} is not in the gold set"
            unmatched.remove(hit)
        return True, "correct (same set)"
    g_int = interval(gold.text)
    if g_int is not None:
        a_int = interval(ans.text)
        if a_int is None or (a_int[0], a_int[3]) != (g_int[0], g_int[3]):
            return False, "not the same interval"
        for x, y in ((a_int[1], g_int[1]), (a_int[2], g_int[2])):
            if not _scalar_equal(Normalised(x, False), Normalised(y, False))[0]:
                return False, "interval endpoints differ"
        return True, "correct (same interval)"
    return None


def check_answer(answer_text: str, gold_text: str) -> tuple[bool, str]:
    """Is one extracted final answer equal to the gold? (equal, reason)."""
    if len(answer_text) > MAX_ANSWER_CHARS:
        return False, f"final answer longer than {MAX_ANSWER_CHARS} characters"
    ans, gold = clean(answer_text), clean(str(gold_text))
    if not ans.text:
        return False, "empty final answer"
    if "=" in ans.text or "\\neq" in ans.text or any(c in ans.text for c in "<>≤≥"):
        return False, "a chain of equations or an inequality, not a value"
    if has_plus_minus(ans.text) and not has_plus_minus(gold.text):
        return False, "\\pm answer for a single gold value"
    collection = _collection_equal(ans, gold)
    if collection is not None:
        return collection
    if split_items(ans.text) is not None or interval(ans.text) is not None:
        return False, "a set or interval for a single gold value"
    if looks_like_several(ans.text):
        return False, "a list of candidates, not one answer"
    return _scalar_equal(ans, gold)


def math_accuracy_verdict(completion: str, answer: str) -> Verdict:
    """1.0 when the completion states exactly one final answer and it equals the gold."""
    if after_thinking(completion) is None:
        return Verdict(0.0, "unclosed <think>")
    cands = final_answers(completion)
    if not cands:
        return Verdict(0.0, "no final answer")
    if len({clean(c).text for c in cands}) > 1:
        return Verdict(0.0, f"several different final answers: {cands[:4]}")
    equal, reason = check_answer(cands[0], answer)
    return Verdict(1.0 if equal else 0.0, reason, cands[0][:MAX_ANSWER_CHARS])


math_accuracy = batch_form(math_accuracy_verdict, ("answer",))
math_accuracy.checks_correctness = True  # rlvr audit holds it to every attack, well-formed or not
