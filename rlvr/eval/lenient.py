"""Format-free grading: did the completion get the answer right, whatever form it wrote it in?

A diagnostic that stands beside the strict verifier (rlvr.rewards.math_accuracy), never a reward: a
run can raise strict accuracy by teaching the answer line alone, or while breaking answers the base
model knew, and only a grade that ignores the form shows which.

The lenient answer is what the completion said last: the last number in it (integers, decimals,
`1,000`, `3/4`, `\\frac{3}{4}`, a leading minus) when the gold is a number (or a worked solution whose
`####` or boxed answer is one: GSM8K's and MATH's golds), otherwise the last final
answer in any accepted form, else the last non-empty line without a lead-in such as "the answer is".
A strict pass is always a lenient pass, so `lenient - strict` is exactly the share of answers that
are right but not in the required form. Text after an unclosed <think> still counts here: the point
is what the model knows, not whether it finished in form.
"""
from __future__ import annotations

import re

from rlvr.rewards.maths.answer import after_thinking, final_answers, gold_answer
from rlvr.rewards.base import Verdict
from rlvr.rewards.maths.accuracy import check_answer, math_accuracy_verdict
from rlvr.rewards.maths.normalise import MAX_ANSWER_CHARS, clean, exact_value

# A number not glued to a word or another number: in "5-3" the minus is an operator, in "= -3" a sign.
_NUMBER = re.compile(r"\\d?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}"
                     r"|(?<![\w.\\])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)(?![\w])")
_LEAD_IN = re.compile(r"^(?:so|thus|therefore|hence)?[\s,]*(?:the\s+)?(?:final\s+)?(?:answer|result)"
                      r"(?:\s+is)?\s*[:=]?\s*", re.IGNORECASE)
MAX_SCAN_CHARS = 4000  # the last number of a very long completion lies in its tail


def last_number(text: str) -> str | None:
    """The last number written in `text` ('\\frac{3}{4}' -> '3/4', '1,000' -> '1,000'), or None."""
    found = None
    for m in _NUMBER.finditer(text[-MAX_SCAN_CHARS:]):
        found = f"{m.group(1)}/{m.group(2)}" if m.group(1) is not None else re.sub(r"\s+", "", m.group(3))
    return found


def _last_line(text: str) -> str | None:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    return _LEAD_IN.sub("", lines[-1]).strip().rstrip(".").strip() or None


def lenient_answer(completion: str, gold: str) -> str | None:
    """The answer a completion ends on, read without regard to the required form (module docstring)."""
    body = after_thinking(completion)
    text = completion.rsplit("<think>", 1)[1] if body is None else body
    if exact_value(clean(gold_answer(str(gold))).text) is not None:  # a worked solution's gold: its final answer
        return last_number(text)
    cands = final_answers(text)
    return cands[-1] if cands else _last_line(text)


def lenient_verdict(completion: str, gold: str) -> Verdict:
    """1.0 when the strict verifier passes, or when the lenient answer equals the gold."""
    strict = math_accuracy_verdict(completion, gold)
    if strict.score == 1.0:
        return strict
    answer = lenient_answer(completion, gold)
    if answer is None:
        return Verdict(0.0, "no answer in any form")
    equal, reason = check_answer(answer[:MAX_ANSWER_CHARS], gold)
    return Verdict(1.0 if equal else 0.0, reason, answer[:MAX_ANSWER_CHARS])
