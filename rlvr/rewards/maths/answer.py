"""Find the one final answer in a completion: `Answer: ...`, `\\boxed{...}` or `<answer>...</answer>`.

An answer line may be dressed as benchmarks and chat models write it: `**Answer:** 100`,
`Answer: **100**`, `Final Answer: \\boxed{100}`, or Minerva's (lm-eval's) `Final Answer: The final
answer is $100$. I hope it is correct.`; the dressing is removed, so that a box and a line stating the
same value are one answer. Every scan here is linear in the completion's length: the completion is
adversarial, and a quadratic scan of an 80 kB one takes tens of seconds.
"""
from __future__ import annotations

import re

from rlvr.rewards.maths.normalise import MAX_ANSWER_CHARS

# "Answer:" anywhere in a line, not only at its start: `\boxed{7} Answer: 8` states two final
# answers, and both must be seen for the disagreement to score 0.
# `[^\n]*` to the end of the line, stripped afterwards: the former `(.*?)[ \t]*$` retried the
# trailing-blank match at every character, quadratic in a long run of blanks.
_ANSWER_LINE = re.compile(r"(?<![a-z])answer[ \t*_]*:([^\n]*)", re.IGNORECASE)
# `Answer $9$`, `Answer \(9\)`, `Answer \[ 9 \]`: no colon, but a line that opens with the word and
# then math that ends the line. Only at a line's start (prose says "the answer $x$ must ..."); each
# segment read to at most 300 characters (longer answers are refused anyway): a bounded scan.
_ANSWER_MATH = re.compile(r"^[ \t#*_]*(?:final[ \t]+)?answer[ \t*_]*(?:\$\$([^$]{1,300})\$\$|\$([^$\n]{1,300})\$"
                          r"|\\\(((?:(?!\\\))[^\n]){1,300})\\\)|\\\[((?:(?!\\\])[\s\S]){1,300})\\\])[ \t.]*$",
                          re.IGNORECASE | re.MULTILINE)
_FRAMING = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s+is\s*:?", re.IGNORECASE)
_HOPE = "i hope it is correct"
# Minerva-style lines written as a sentence (`Final Answer: The volume of $ABCD$ is 120.`): the value
# after the sentence's last "is", when nothing before it hedges or negates and nothing after it is a word.
_IS = re.compile(r"\s(?:is|are|equals)\s", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:not|no|never|n't|or|either|neither|nor|unless|except|if|maybe|perhaps|possibly|probably)\b",
                    re.IGNORECASE)
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_GOLD_OR = re.compile(r"\bor\b")   # in a gold (trusted), "or" lists the solutions; in an answer it hedges
# One math segment framed by a few fixed phrases (`\boxed{Therefore $x \geq 5$ is the solution.}`,
# `We find that $x < 3$.`): the segment is the answer. Other prose around math stays as written.
_MATH_SEGMENT = re.compile(r"\$([^$]+)\$|\\\((.+?)\\\)")
_LEAD = re.compile(r"\s*(?:(?:therefore|thus|so|hence),?\s*)?(?:we\s+(?:find|get|have|obtain|conclude)\s+(?:that\s+)?"
                   r"|the\s+(?:solution|answer|result)\s+is\s*:?\s*)?", re.IGNORECASE)
_TAIL = re.compile(r"\s*(?:is\s+(?:the|our)\s+(?:solution|answer))?\s*[.!]?\s*", re.IGNORECASE)
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
    after the last </think> (`<think>a</think><think>... Answer: 42`): an answer still inside thinking is not final."""
    body = text.rsplit("</think>", 1)[1] if "</think>" in text else text
    return None if "<think>" in body else body


def line_answer(content: str) -> str:
    """What an answer line states, without markdown emphasis, Minerva's framing, `$...$` or a box
    that holds all of it."""
    s = content.strip()
    if _PLAIN_LINE.fullmatch(s):  # `Answer: 42`, most lines: nothing to undress (checks per second)
        return s.removesuffix(".").strip()
    s = s.strip("*_").strip()
    s = s.split("<|", 1)[0]   # a chat template's special token ends the model's turn (`<|im_start|>user`)
    if (hope := s.lower().find(_HOPE)) != -1:   # nor is anything after Minerva's closing words
        s = s[:hope].rstrip()
    if m := _FRAMING.match(s):
        s = s[m.end():]
    else:
        s = _stated(s)
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
    values joined by "or" are the list of solutions; any other gold is used as written. The gold is
    trusted data, never a candidate."""
    spans = _box_spans(gold) if "\\boxed{" in gold else []
    between = [gold[j:i] for (_, j), (i, _) in zip(spans, spans[1:])]
    if spans and all(_GOLD_GLUE.fullmatch(b) for b in between):
        gold = ", ".join(gold[i + len("\\boxed{"):j - 1].strip() for i, j in spans)
    if "or" in gold and len(parts := _GOLD_OR.split(gold)) > 1 and not any(_WORD.search(p) for p in parts):
        gold = ", ".join(p.strip().strip("$").strip() for p in parts)   # `(11,7) or (7,11)`: every solution
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
    math = "$" in body or "\\(" in body or "\\[" in body   # math delimiters: most completions have none
    if math:
        cands += [next(g for g in m.groups() if g is not None) for m in _ANSWER_MATH.finditer(body)]
    cands += answer_tags(body)
    cands += boxed_contents(body)
    if math:
        cands = [_math_of_prose(c) for c in cands]
    return [c.strip() for c in cands if c.strip()]


def _stated(line: str) -> str:
    """`The largest $n$ is 34.` -> `34`; any other line as it is."""
    s = line.strip().removesuffix(".").strip()
    verbs = list(_IS.finditer(s)) if len(s) <= MAX_ANSWER_CHARS else []
    if not verbs or _HEDGE.search(s) or not _WORD.search(s[:verbs[-1].start()]):
        return line
    value = s[verbs[-1].end():].strip()
    return value if value and not _WORD.search(value) else line


def _math_of_prose(answer: str) -> str:
    """The one math segment of an answer framed by a fixed phrase (`Therefore $x \\geq 5$ is the
    solution.`); any other answer as it is."""
    if len(answer) > MAX_ANSWER_CHARS or ("$" not in answer and "\\(" not in answer):
        return answer
    segments = list(_MATH_SEGMENT.finditer(answer))
    if len(segments) != 1:
        return answer
    m = segments[0]
    framed = _LEAD.fullmatch(answer[:m.start()]) and _TAIL.fullmatch(answer[m.end():])
    return (m.group(1) or m.group(2)).strip() if framed and _WORD.search(answer[:m.start()] + answer[m.end():]) \
        else answer
