"""Find the one final answer in a completion: `Answer: ...`, `\\boxed{...}` or `<answer>...</answer>`."""
from __future__ import annotations

import re

# "Answer:" anywhere in a line, not only at its start: `\boxed{7} Answer: 8` states two final
# answers, and both must be seen for the disagreement to score 0 (issue 13, class 5).
_ANSWER_LINE = re.compile(r"(?<![a-z])answer[ \t]*:[ \t]*(.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)


def boxed_contents(text: str) -> list[str]:
    """Contents of every \\boxed{...}, with nested braces balanced; an unclosed box is skipped."""
    found, start = [], 0
    while (i := text.find("\\boxed{", start)) != -1:
        depth, j = 1, i + len("\\boxed{")
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            found.append(text[i + len("\\boxed{"):j - 1])
        start = j
    return found


def answer_tags(text: str) -> list[str]:
    """Contents of every closed <answer>...</answer>, as `re.finditer(r"<answer>(.*?)</answer>",
    re.DOTALL)` would give them, in linear time: that regex retries from every unclosed <answer>
    and scans to the end each time, so a completion of repeated `<answer>` cost the trainer
    quadratic time (80 kB: ~6 s)."""
    found, start = [], 0
    while (i := text.find("<answer>", start)) != -1:
        j = text.find("</answer>", i + len("<answer>"))
        if j == -1:          # no close after this one: none after any later one either
            break
        found.append(text[i + len("<answer>"):j])
        start = j + len("</answer>")
    return found


def after_thinking(text: str) -> str | None:
    """The text after the last </think>; None when a <think> is left open."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return None
    return text


def final_answers(text: str) -> list[str]:
    """Every final-answer candidate after the reasoning, in the three accepted forms."""
    body = after_thinking(text)
    if body is None:
        return []
    cands = [m.group(1) for m in _ANSWER_LINE.finditer(body)]
    cands += answer_tags(body)
    cands += boxed_contents(body)
    return [c.strip() for c in cands]
