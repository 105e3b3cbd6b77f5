"""Correctness of the one final answer against the gold answer (integers in this version)."""
from __future__ import annotations

from rlvr.rewards.answer import after_thinking, final_answers, parse_integer
from rlvr.rewards.base import Verdict, batch_form


def math_accuracy_verdict(completion: str, answer: str) -> Verdict:
    """1.0 when the completion states exactly one final answer and it equals the gold integer."""
    if after_thinking(completion) is None:
        return Verdict(0.0, "unclosed <think>")
    cands = final_answers(completion)
    if not cands:
        return Verdict(0.0, "no final answer")
    values = {parse_integer(c) for c in cands}
    if len(values) > 1:
        return Verdict(0.0, f"several different final answers: {cands[:4]}")
    value = values.pop()
    if value is None:
        return Verdict(0.0, f"final answer is not an integer: {cands[0][:40]!r}", cands[0])
    gold = parse_integer(str(answer))
    if gold is None:
        return Verdict(0.0, f"gold answer {answer!r} is not an integer", cands[0])
    if value == gold:
        return Verdict(1.0, "correct", str(value))
    return Verdict(0.0, f"wrong: {value} != {gold}", str(value))


math_accuracy = batch_form(math_accuracy_verdict, ("answer",))
