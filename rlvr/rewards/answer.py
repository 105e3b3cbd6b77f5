"""Find the one final answer in a completion: `Answer: ...`, `\\boxed{...}` or `<answer>...</answer>`.

An answer line may be dressed as benchmarks and chat models write it: `**Answer:** 100`,
`Answer: **100**`, `Final Answer: \\boxed{100}`, or Minerva's (lm-eval's) `Final Answer: The final
answer is $100$. I hope it is correct.`; the dressing is removed, so that a box and a line stating the
same value are one answer. Every scan here is linear in the completion's length (issue 27, item 9).
"""
from __future__ import annotations

import re

# "Answer:" anywhere in a line, not only at its start: `\boxed{7} Answer: 8` states two final
# answers, and both must be seen for the disagreement to score 0 (issue 13, class 5).
# `[^\n]*` to the end of the line, stripped afterwards: the former `(.*?)[ \t]*$` retried the
# trailing-blank match at every character, quadratic in a long run of blanks.
_ANSWER_LINE = re.compile(r"(?<![a-z])answer[ \t*_]*:([^\n]*)", re.IGNORECASE)
_FRAMING = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s+is\s*:?", re.IGNORECASE)
_HOPE = "i hope it is correct"
# What may stand between the boxes of a gold written as several (`\boxed{1} and \boxed{-2}`):
# separators and math delimiters only; any other word (`\boxed{1} no no \boxed{2}`) keeps the gold as is.
_BRACE = re.compile(r"[{}]")
_PLAIN_LINE = re.compile(r"[\d.,+\-/ ]*")
_CLOSE = str.maketrans("([", ")]")
_GOLD_GLUE = re.compile(r"(?:[\s,;.$]|\\[()\[\]]|\\quad|\\text\{\s*and\s*\}|\band\b)*")


def _box_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every closed \\boxed{...}, nested braces balanced; an unclosed box is skipped."""
    found, start = [], 0
    while (i := text.find("\\boxed{", start)) != -1:
        depth, start = 1, len(text)  # unclosed: nothing after it can close either
        for m in _BRACE.finditer(text, i + len("\\boxed{")):  # brace to brace, not character by character
            depth += 1 if m.group() == "{" else -1
            if depth == 0:
                found.append((i, m.end()))
                start = m.end()
                break
    return found


def boxed_contents(text: str) -> list[str]:
    """Contents of every \\boxed{...}, with nested braces balanced; an unclosed box is skipped."""
    return [text[i + len("\\boxed{"):j - 1] for i, j in _box_spans(text)]


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
    """The text after the last </think>; None when a <think> is left open, including one opened
    after the last </think> (`<think>a</think><think>... Answer: 42`, issue 27 item 11)."""
    body = text.rsplit("</think>", 1)[1] if "</think>" in text else text
    return None if "<think>" in body else body


def line_answer(content: str) -> str:
    """What an answer line states, without markdown emphasis, Minerva's framing, `$...$` or a box
    that holds all of it."""
    s = content.strip()
    if _PLAIN_LINE.fullmatch(s):  # `Answer: 42`, most lines: nothing to undress (checks per second)
        return s.removesuffix(".").strip()
    s = s.strip("*_").strip()
    if s.lower().rstrip(".").endswith(_HOPE):
        s = s.rstrip(".")[:-len(_HOPE)].rstrip()
    if m := _FRAMING.match(s):
        s = s[m.end():]
    s = s.strip().removesuffix(".").strip().strip("$").strip().strip("*_").strip()
    if s[:2] in ("\\(", "\\[") and s[-2:] == s[:2].translate(_CLOSE):  # `\((-6, 10)\)`: delimiters, not brackets
        s = s[2:-2].strip()
    spans = _box_spans(s)
    if spans and all(not s[a:b].strip() for a, b in zip([0] + [j for _, j in spans], [i for i, _ in spans] + [len(s)])):
        # only boxes on the line: they are counted as boxes
        return s[spans[0][0] + len("\\boxed{"):spans[0][1] - 1].strip() if len(spans) == 1 else ""
    return s


def gold_answer(gold: str) -> str:
    """The gold's own answer when the gold is written out with boxes (a worked solution, `x \\in
    \\boxed{[0, 7)}`): one box is its content, several boxes joined only by separators are one list;
    any other gold is used as written. The gold is trusted data, never a candidate."""
    spans = _box_spans(gold) if "\\boxed{" in gold else []
    between = [gold[j:i] for (_, j), (i, _) in zip(spans, spans[1:])]
    if spans and all(_GOLD_GLUE.fullmatch(b) for b in between):
        gold = ", ".join(gold[i + len("\\boxed{"):j - 1].strip() for i, j in spans)
    return _semicolons_as_commas(gold) if ";" in gold else gold


def _semicolons_as_commas(gold: str) -> str:
    """A gold's `;` separates as `,` does (`-12;-11;-10`, the triple `(0;-2;6)`) within a bracket
    level that has no `,` of its own; where both stand (`p=5,q=2;p=7,q=2`) the gold is left as is."""
    levels: list[list] = [[False, []]]  # per open bracket: (has a comma, positions of its semicolons)
    done: list[int] = []
    for i, ch in enumerate(gold):
        if ch in "([{":
            levels.append([False, []])
        elif ch in ")]}" and len(levels) > 1:
            comma, semis = levels.pop()
            done += [] if comma else semis
        elif ch in ",;":
            levels[-1][0] |= ch == ","
            levels[-1][1] += [i] if ch == ";" else []
    done += [] if levels[0][0] else levels[0][1]
    chars = list(gold)
    for i in done:
        chars[i] = ","
    return "".join(chars)


def final_answers(text: str) -> list[str]:
    """Every final-answer candidate after the reasoning, in the three accepted forms; an answer
    line with nothing on it (`**Final Answer:**` above a box) states none."""
    body = after_thinking(text)
    if body is None:
        return []
    cands = [line_answer(m.group(1)) for m in _ANSWER_LINE.finditer(body)]
    cands += answer_tags(body)
    cands += boxed_contents(body)
    return [c.strip() for c in cands if c.strip()]
