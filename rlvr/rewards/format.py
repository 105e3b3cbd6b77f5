"""Format reward: one parseable final answer, in the stated form, with the reasoning closed."""
from __future__ import annotations

import re
import unicodedata

from rlvr.rewards.maths.answer import after_thinking, boxed_contents, final_answers
from rlvr.rewards.base import Verdict, batch_form
from rlvr.rewards.maths.forms import one_answer
from rlvr.rewards.maths.normalise import MAX_ANSWER_CHARS, clean, has_plus_minus, looks_like_several

STYLES = ("answer_line", "boxed", "tag", "any")
# Characters that render as nothing (zero-width, BOM, word joiner: Unicode's format category) or as blank space.
_BLANK_CATEGORIES = ("Cf", "Cc", "Zs", "Zl", "Zp")


def _states_nothing(value: str) -> bool:
    """An answer of invisible characters (`Answer: \u200b`) or of bare punctuation (`Answer: ?`, `...`)
    fills the form without stating anything. Brackets stay content: `{}` and `[]` may be an empty set or list."""
    shown = [c for c in value if unicodedata.category(c) not in _BLANK_CATEGORIES]
    return all(unicodedata.category(c) == "Po" for c in shown)
_ANSWER_LINE_START = re.compile(r"[ \t]*[*_]*(?:final[ \t]+)?answer[ \t*_]*:", re.IGNORECASE)


def ends_with_answer(body: str, style: str) -> bool:
    """Does `body` end (blanks, and for a box a full stop or `$`, aside) with its final answer in
    `style`? String operations on the tail, linear in the body: the former end-anchored regexes
    (`[^\\n]*\\S[^\\n]*\\s*\\Z`, `\\\\boxed\\{.*\\}[\\s.$]*\\Z`) retried from every line or box, quadratic
    in an adversarial completion."""
    if style == "answer_line":
        last = body.rstrip().rpartition("\n")[2]
        m = _ANSWER_LINE_START.match(last)
        return m is not None and bool(last[m.end():].strip())
    if style == "boxed":
        end = len(body)
        while end and (body[end - 1].isspace() or body[end - 1] in ".$"):
            end -= 1
        return body[:end].endswith("}") and "\\boxed{" in body[:end - 1]
    tail = body.rstrip()
    return tail.endswith("</answer>") and "<answer>" in tail[:-len("</answer>")]


def format_check(completion: str, style: str = "answer_line") -> Verdict:
    """1.0 when the reasoning is closed, there is exactly one final answer (the same value stated
    twice, say boxed and on an answer line, is one), it is a single value, and (unless style is
    'any') the completion ends with it in the given form."""
    body = after_thinking(completion)
    if body is None:
        return Verdict(0.0, "unclosed <think>")
    if completion.count("<think>") > completion.count("</think>"):
        return Verdict(0.0, "unbalanced <think> tags")
    cands = final_answers(completion)
    if not cands or not one_answer(cands):
        return Verdict(0.0, f"{len(cands)} final answers, expected one")
    value = clean(cands[0]).text
    if not value or len(value) > MAX_ANSWER_CHARS:
        return Verdict(0.0, "empty or overlong final answer", cands[0][:40])
    if _states_nothing(value):
        return Verdict(0.0, "the final answer states nothing (only invisible characters or punctuation)",
                       cands[0][:40])
    if "<|" in value or "hope it is correct" in value.lower():   # text went on after where the answer ends
        return Verdict(0.0, "text after the end of the final answer", cands[0][:40])
    if looks_like_several(value) or has_plus_minus(value):
        return Verdict(0.0, "several candidates in the final answer", cands[0][:40])
    if style != "any" and not ends_with_answer(body, style):
        return Verdict(0.0, f"does not end with the final answer as {style}", cands[0][:40])
    return Verdict(1.0, "well formed", cands[0][:40])


def make_format_reward(style: str = "answer_line"):
    if style not in STYLES:
        raise ValueError(f"format style must be one of {STYLES}, got {style!r}")

    def format_reward_verdict(completion: str) -> Verdict:
        return format_check(completion, style)

    format_reward_verdict.__doc__ = f"Format reward, style {style!r}: " + (format_check.__doc__ or "")
    return batch_form(format_reward_verdict, (), checks_correctness=False)  # a well-formed wrong answer earns it


format_reward = make_format_reward("answer_line")
__all__ = ["boxed_contents", "format_check", "format_reward", "make_format_reward"]
