"""Find the one final answer in a completion: `Answer: ...`, `\\boxed{...}` or `<answer>...</answer>`.

An answer line may be dressed as benchmarks and chat models write it: `**Answer:** 100`,
`Answer: **100**`, `Final Answer: \\boxed{100}`, or Minerva's (lm-eval's) `Final Answer: The final
answer is $100$. I hope it is correct.`; the dressing is removed, so that a box and a line stating the
same value are one answer. Every scan here is linear in the completion's length: the completion is
adversarial, and a quadratic scan of an 80 kB one takes tens of seconds.
"""
from __future__ import annotations

import re
import unicodedata

from rlvr.rewards.maths.normalise import MAX_ANSWER_CHARS, clean
from rlvr.rewards.maths.units import SCALE_WORDS, read_unit

# "Answer:" anywhere in a line, not only at its start: `\boxed{7} Answer: 8` states two final
# answers, and both must be seen for the disagreement to score 0.
# `[^\n]*` to the end of the line, stripped afterwards: the former `(.*?)[ \t]*$` retried the
# trailing-blank match at every character, quadratic in a long run of blanks.
# A colon may be fullwidth (`Answer：8`); a second "Answer:" on the same line states a second answer
# (_line_contents), not a part of the first.
_ANSWER_LINE = re.compile(r"(?<![a-z])answer[ \t*_]*[:：]([^\n]*)", re.IGNORECASE)
_LABEL = re.compile(r"(?<![a-z])answer[ \t*_]*[:：]", re.IGNORECASE)
_NEXT_LINE = re.compile(r"[ \t*_]*\n[ \t]*\n?[ \t]*([^\n]*)")
_TRAILING_FINAL = re.compile(r"(?:\bthe)?\s*\bfinal$", re.IGNORECASE)
# GSM8K's (and verl's) final answer: a line `#### 72`; a markdown heading (`#### Step 1`) opens with a word.
_HASHES = re.compile(r"^[ \t]*####[ \t]*([^A-Za-z \t\n][^\n]*)$", re.MULTILINE)
_HEADING_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_FENCE = re.compile(r"^[ \t]*```[^\n]*\n[\s\S]*?^[ \t]*```[ \t]*$", re.MULTILINE)
# What may follow the end of a model's turn on the line it ends: a chat template's real turn tokens (by
# name: `<|maybe 13|>` is text, and hides a second value), a role name, and the bare `<|` and `|>` of a
# degenerate run, which state nothing.
_TURN_TOKEN = (r"<\|(?:im_end|im_start|im_sep|endoftext|end_of_text|eot_id|eom_id|end|start_header_id|"
               r"end_header_id|user|assistant|system)\|>")
_AFTER_TOKEN = re.compile(r"(?:" + _TURN_TOKEN + r"|[<|>\s]|user|assistant|system)*")
# `Answer $9$`, `Answer \(9\)`, `Answer \[ 9 \]`: no colon, but a line that opens with the word and
# then math that ends the line. Only at a line's start (prose says "the answer $x$ must ..."); each
# segment read to at most 300 characters (longer answers are refused anyway): a bounded scan.
# The word capitalised (`Answer`, `ANSWER`), on a line after one that does not end mid-sentence (in a
# letter, digit or comma): wrapped prose ("the candidate\nanswer $13$\ninto ...") is no answer.
_ANSWER_MATH = re.compile(r"(?:\A|(?<![A-Za-z0-9,; \t])[ \t]*\n)[ \t#*_]*(?:(?:Final|FINAL)[ \t]+)?(?:Answer|ANSWER)"
                          r"[ \t*_]*(?:\$\$([^$]{1,300})\$\$|\$([^$\n]{1,300})\$"
                          r"|\\\(((?:(?!\\\))[^\n]){1,300})\\\)|\\\[((?:(?!\\\])[\s\S]){1,300})\\\])"
                          r"[ \t.]*(?:<\|[^|\n]{1,40}\|>[ \t]*)*$",
                          re.MULTILINE)
_FRAMING = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s+is\s*:?", re.IGNORECASE)
_HOPE = "i hope it is correct"
# Minerva-style lines written as a sentence (`Final Answer: The volume of $ABCD$ is 120.`): the value
# after the sentence's last "is", when nothing before it hedges or negates and nothing after it is a word.
_IS = re.compile(r"\s(?:is|are|equals)\s", re.IGNORECASE)
# A statement is plain when none of these stand anywhere in it: negations (contractions included),
# hedges, alternatives, conditions, and the words that quote a claim or a question instead of stating
# a result ("the claim to prove is that ...", "we check whether ...").
_HEDGE = re.compile(r"n['’]t\b|\b(?:not|no|none|never|nothing|cannot|wrong\w*|incorrect\w*|false|tentative\w*|"
                    r"reject\w*|rough\w*|bounds?|or|either|neither|"
                    r"nor|unless|except|if|whether|maybe|perhaps|possibly|probably|likely|unlikely|might|"
                    r"guess|think|believe|seems?|appears?|estimated?|suspect|doubt|unsure|uncertain|assume|assuming|suppose|claim|claims|"
                    r"prove|show|shown|question|asks|asked|ask|given|want|wants|need|needs|suggests?|"
                    r"approximat\w*|about|around|nearly|almost)\b", re.IGNORECASE)
_LETTER_MATH = re.compile(r"\$[^$]*[A-Za-z][^$]*\$")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_GOLD_OR = re.compile(r"\bor\b")   # in a gold (trusted), "or" lists the solutions; in an answer it hedges
_GOLD_LABELLED = re.compile(r"([A-Za-z](?:_\{?\w+\}?)?)\s*=\s*([^=]+)")
# One math segment framed by a few fixed phrases (`\boxed{Therefore $x \geq 5$ is the solution.}`,
# `We find that $x < 3$.`): the segment is the answer. Other prose around math stays as written.
_MATH_SEGMENT = re.compile(r"\$([^$]+)\$|\\\((.+?)\\\)")
_LEAD = re.compile(r"\s*(?:(?:therefore|thus|so|hence),?\s*)?(?:we\s+(?:find|get|have|obtain|conclude)\s+(?:that\s+)?"
                   r"|the\s+(?:solution|answer|result)\s+is\s*:?\s*)?", re.IGNORECASE)
_TAIL = re.compile(r"\s*(?:is\s+(?:the|our)\s+(?:solution|answer))?\s*[.!]?\s*", re.IGNORECASE)
# What may stand between the boxes of a gold written as several (`\boxed{1} and \boxed{-2}`):
# separators and math delimiters only; any other word (`\boxed{1} no no \boxed{2}`) keeps the gold as is.
_BRACE = re.compile(r"[{}]")
_BOX_SPACE = re.compile(r"[ \t]*")
# What may stand between a box and a unit or scale word that renders as part of its value: spaces, LaTeX's
# spacing commands, closing math delimiters, a line break (`$\boxed{12}$ km`, `\boxed{12}~\text{km}`).
_BOX_GAP = re.compile(r"(?:[ \t~$\n]|\\[ ,;:!]|\\q?quad(?![A-Za-z])|\\[)\]]){0,20}")
_UNIT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|textsf|texttt|mbox|mathrm|mathit|mathsf|"
                       r"operatorname)\s*\{([^{}\n]{0,80})\}(\s*\^\s*\{?\s*[23]\s*\}?)?")
_WORD_AFTER = re.compile(r"([A-Za-z’']+)(\s*\^\s*\{?\s*[23]\s*\}?)?")
# Answer statements in forms the extractor does not read as final (`Answer = 13`, `the answer is actually 13`,
# `**Final answer** 13`, a lookalike or fullwidth label, `答案：13`): read loosely, only to see a second value,
# and only a plain number that ends its statement (`Answer: 2^{10}` states no 2). A statement ends at the end
# of its line, at a sentence's end (`the answer is 4. So \boxed{3}`) or where a final-answer form follows on
# the same line (`the answer is 4 \boxed{3}`): a box sharing the line with a stated value is a second answer.
_LOOSE_END = (r"(?=[ \t$)*\\]{0,12}(?:[.!?;,:]?[ \t$)*\\]{0,12}(?:\\(?:[bB]oxed|fbox|framebox|bbox)(?![A-Za-z])"
              r"|<answer>|####)|[.!?;](?:[ \t]|$)|[.!?]{0,3}[ \t$)*\\]{0,12}$))")
# The label may be abbreviated (`Ans: 4`, `ANS. 4`); the value may be a variable's (`the answer is x = 4`,
# `$x=4$`) and a plain fraction (`\frac{8}{2}`, `8/2`).
_LOOSE_LABEL = re.compile(r"(?:answer|(?<![A-Za-z])ans\b\.?|答案)(?:[ \t*_:=;꞉]|-(?=[ \t])){0,12}"
                          r"(?:is(?:[ \t]{1,4}(?:actually|really|now|then|still))?)?"
                          r"[ \t*_$(\\:]{0,8}(?:[A-Za-z](?:_\{?\w{1,4}\}?)?[ \t]{0,4}=[ \t]{0,4})?"
                          r"([-+]?(?:\\[dt]?frac\{\d{1,12}\}\{\d{1,12}\}|\d[\d,]*(?:\.\d+)?(?:/\d+)?))" + _LOOSE_END,
                          re.IGNORECASE | re.MULTILINE)   # bounded runs: a long blank run costs one pass, never a retry per blank
# Cyrillic and Greek letters drawn like Latin ones, folded so a lookalike label (`Аnswer`) reads as one
_CONFUSABLE = str.maketrans("АаВЕеКМНОоРрСсТХхУуЅѕІіΑΕΟοΡρΤΧ", "AaBEeKMHOoPpCcTXxYySsIiAEOoPpTX")
_INVISIBLE = re.compile("[\u200b-\u200f\u2060\ufeff\u00ad]")
_NOT_EQUALS = re.compile(r"\\not\s*=")
# <answer> and <think> tags as a model may write them (`<ANSWER>`, `< /answer >`): one spelling for the scans
_TAG = re.compile(r"<[ \t]{0,3}(/?)[ \t]{0,3}(answer|think)[ \t]{0,3}>", re.IGNORECASE)
_BOX_CMD = re.compile(r"\\(?:boxed|Boxed|fbox|framebox|bbox)(?![A-Za-z])(?:\[[^\]\n]{0,40}\])?")
_AFTER_BOX = re.compile(r"[ \t$]*((?:\^\s*\{?\s*\\circ\s*\}?|°|\\,|[ \t])*"
                        r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm)"
                        r"\s*\{[^{}\n]{0,80}\}(?:\s*\^\s*\{?\s*[23]\s*\}?)?|\^\s*\{?\s*\\circ\s*\}?|°)")
# A `%` not after a digit or a backslash opens a LaTeX comment: a box after it on its line does not render.
_COMMENT = re.compile(r"(?<![\d\\])%(?=[^\n]*\\(?:[bB]oxed|fbox|framebox|bbox))[^\n]*")
_PLAIN_LINE = re.compile(r"[\d.,+\-/ ]*")
_CLOSE = str.maketrans("([", ")]")
_GOLD_GLUE = re.compile(r"(?:[\s,;.$]|\\[()\[\]]|\\quad|\\text\{\s*and\s*\}|\band\b)*")


def _box_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, end, content start) of every closed box (`\\boxed{...}`, `\\boxed {`, and the other
    commands that render a frame: `\\fbox`, `\\framebox`, `\\Boxed`, `\\bbox[...]`), nested braces
    balanced; an unclosed box is skipped."""
    found, start = [], 0
    while (m := _BOX_CMD.search(text, start)) is not None:
        i, k = m.start(), _BOX_SPACE.match(text, m.end()).end()
        if text[k:k + 1] != "{":   # `\\boxedx` is none
            start = k if k > m.start() else m.end()
            continue
        depth, start = 1, len(text)  # unclosed: nothing after it can close either
        for b in _BRACE.finditer(text, k + 1):  # brace to brace, not character by character
            depth += 1 if b.group() == "{" else -1
            if depth == 0:
                found.append((i, b.end(), k + 1))
                start = b.end()
                break
    return found


def boxed_contents(text: str) -> list[str]:
    """Contents of every \\boxed{...}, with nested braces balanced; an unclosed box is skipped."""
    return [text[k:j - 1] for _, j, k in _box_spans(text)]


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
    that holds all of it. A cut point (a chat template's token, Minerva's "I hope it is correct")
    ends the line only when nothing but more tokens or punctuation follows it: text after one is
    part of the answer, which then reads as no single value."""
    s = content.strip()
    if _PLAIN_LINE.fullmatch(s):  # `Answer: 42`, most lines: nothing to undress (checks per second)
        return s.removesuffix(".").strip()
    s = s.strip("*_").strip()
    if s[-5:].lower() == "final":   # `Answer: 12. Final Answer: 13`: the second label's first word
        s = (s[:-40] + _TRAILING_FINAL.sub("", s[-40:])).strip().strip("*_").strip()   # a bounded tail: linear
    if (token := s.find("<|")) != -1 and _AFTER_TOKEN.fullmatch(s, token):
        s = s[:token]   # `Answer: 12<|im_end|><|im_start|>user`: the model's turn ended there
    if (hope := s.lower().find(_HOPE)) != -1 and not s[hope + len(_HOPE):].strip(" \t.!*_"):
        s = s[:hope].rstrip()
    if m := _FRAMING.match(s):
        s = s[m.end():]
    else:
        s = _stated(s)
    s = s.strip().removesuffix(".").strip().strip("$").strip().strip("*_").strip()
    if s[:2] in ("\\(", "\\[") and s[-2:] == s[:2].translate(_CLOSE):  # `\((-6, 10)\)`: delimiters, not brackets
        s = s[2:-2].strip()
    return _unboxed(s)


def _unboxed(s: str) -> str:
    """Boxes in a stated answer: only boxes (`\\boxed{12}`) are counted as boxes ("" for several,
    their content for one); one box inside an answer (`x = \\boxed{12}`) is read as its content."""
    spans = _box_spans(s) if "box" in s or "Box" in s else []
    if not spans:
        return s
    gaps = zip([0] + [j for _, j, _ in spans], [i for i, _, _ in spans] + [len(s)])
    if all(not s[a:b].strip() for a, b in gaps):
        return s[spans[0][2]:spans[0][1] - 1].strip() if len(spans) == 1 else ""
    if len(spans) == 1:
        i, j, k = spans[0]
        return (s[:i] + s[k:j - 1] + s[j:]).strip()
    return s


def gold_answer(gold: str) -> str:
    """The gold's own answer when the gold is written out with boxes (a worked solution, `x \\in
    \\boxed{[0, 7)}`): one box is its content, several boxes joined only by separators are one list,
    several boxes of one content (a worked solution that boxes its answer twice) that content;
    values joined by "or" are the list of solutions; any other gold is used as written. The gold is
    trusted data, never a candidate."""
    if "####" in gold:   # GSM8K: a worked solution (with `<<3*4=12>>` marks), then `#### 12`
        gold = gold.rsplit("####", 1)[1].strip()
    spans = _box_spans(gold) if "boxed" in gold else []
    between = [gold[j:i] for (_, j, _), (i, _, _) in zip(spans, spans[1:])]
    contents = [gold[k:j - 1].strip() for _, j, k in spans]
    if spans and (all(_GOLD_GLUE.fullmatch(b) for b in between) or len(set(contents)) == 1):
        gold = ", ".join(dict.fromkeys(contents)) if len(set(contents)) == 1 else ", ".join(contents)
    if "or" in gold and len(parts := _GOLD_OR.split(gold)) > 1 and not any(_WORD.search(p) for p in parts):
        parts = [p.strip().strip("$").strip() for p in parts]   # `(11,7) or (7,11)`: every solution
        labels = {m.group(1).strip() if (m := _GOLD_LABELLED.fullmatch(p)) else None for p in parts}
        if len(labels) == 1 and None not in labels:   # `x = 5 or x = -5`: the values of the one unknown
            parts = [_GOLD_LABELLED.fullmatch(p).group(2).strip() for p in parts]
        gold = ", ".join(parts)
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
    """Every final-answer candidate after the reasoning, in every accepted form: answer lines (the
    line after a bare `Final Answer:` when it has nothing on it), `Answer $9$`, tags, boxes, GSM8K's
    `#### 9`. Code blocks and LaTeX comments render no answer and are skipped."""
    if "<" in text:
        text = _TAG.sub(lambda m: f"<{m.group(1)}{m.group(2).lower()}>", text)
    body = after_thinking(text)
    if body is None:
        return []
    if "```" in body:   # `print(f"Answer: {x}")` in shown code states nothing
        body = _FENCE.sub("", body)
    if "%" in body:
        body = _COMMENT.sub("", body)
    if "\\not" in body:   # `\not=` renders as `≠`: a relation, never an equals sign
        body = _NOT_EQUALS.sub(r"\\neq ", body)
    cands = [line_answer(c) for c in _line_contents(body)]
    math = "$" in body or "\\(" in body or "\\[" in body   # math delimiters: most completions have none
    if math:
        cands += [next(g for g in m.groups() if g is not None) for m in _ANSWER_MATH.finditer(body)]
    if "<answer>" in body:
        cands += [_unboxed(t.strip()) for t in answer_tags(body)]
    if "box" in body or "Box" in body:
        cands += _boxes_with_units(body)
    if "####" in body:
        cands += [line_answer(m.group(1)) for m in _HASHES.finditer(body) if _hashes_value(m.group(1))]
    if math:
        cands = [_math_of_prose(c) for c in cands]
    return [c.strip() for c in cands if c.strip()]


def loose_answers(text: str) -> list[str]:
    """Numbers stated after an answer word in any form, the final-answer forms included, with fullwidth
    and lookalike letters and invisible characters folded: a second value in a form `final_answers` does
    not read still makes two answers."""
    if "<" in text:
        text = _TAG.sub(lambda m: f"<{m.group(1)}{m.group(2).lower()}>", text)
    body = after_thinking(text)
    if body is None:
        return []
    if "```" in body:
        body = _FENCE.sub("", body)
    if not body.isascii():   # most completions are ASCII: nothing to fold
        body = _INVISIBLE.sub("", unicodedata.normalize("NFKC", body)).translate(_CONFUSABLE)
    # commas as the final answer reads them (`1,000` a thousand, `0,5` a decimal comma): never dropped
    return [m.group(1).rstrip(",") for m in _LOOSE_LABEL.finditer(body)]


def _hashes_value(content: str) -> bool:
    """Is a `####` line a final answer, not a numbered markdown heading (`#### 2. Add the costs`)?
    Words on it must be its unit."""
    return not _HEADING_WORD.search(content) or bool(clean(content.strip()).unit)


def _boxes_with_units(body: str) -> list[str]:
    """Each box's content with the unit, scale or hedge that renders right after it: `\\boxed{24} \\text{ cm}`
    is 24 cm, `$\\boxed{12}$ thousand` is 12 thousand, and `\\boxed{24} \\text{ is not right}` is no plain 24."""
    out = []
    for _, j, k in _box_spans(body):
        after = _AFTER_BOX.match(body, j) if body[j:j + 1] in (" ", "\t", "$", "\\", "^", "°") else None
        out.append(body[k:j - 1] + (" " + after.group(1) if after else _trailer(body, j)))
    return out


def _trailer(body: str, j: int) -> str:
    """The unit, scale or hedge after the box that ends at `j`, past spacing and math delimiters; "" when
    what follows is prose about the box (`\\boxed{12} is the total`)."""
    g = _BOX_GAP.match(body, j).end()
    cmd = _UNIT_CMD.match(body, g)
    if cmd:
        return " \\text{" + cmd.group(1) + "}" + (cmd.group(2) or "")
    word = _WORD_AFTER.match(body, g)
    if word and (read_unit(word.group(1), prose=True) or word.group(1).lower() in SCALE_WORDS
                 or _HEDGE.search(word.group(1))):
        return " " + word.group(1) + (word.group(2) or "")
    return ""


def _line_contents(body: str) -> list[str]:
    """What every answer label states: the rest of its line up to the next label on that line, or
    the next line when nothing stands after it."""
    out = []
    for m in _ANSWER_LINE.finditer(body):
        parts = _LABEL.split(m.group(1)) if "nswer" in m.group(1) or "NSWER" in m.group(1) else [m.group(1)]
        out += parts[:-1]
        out.append(parts[-1] if parts[-1].strip(" \t*_") else _next_line(body, m.end()))
    return out


def _next_line(body: str, end: int) -> str:
    m = _NEXT_LINE.match(body, end)
    return m.group(1) if m else ""


def _stated(line: str) -> str:
    """`The largest $n$ is 34.` -> `34`; any other line as it is."""
    s = line.strip().removesuffix(".").strip()
    verbs = list(_IS.finditer(s)) if len(s) <= MAX_ANSWER_CHARS else []
    if not verbs or _HEDGE.search(s):
        return line
    if len(verbs) > 1 and any(c.isdigit() for c in s[verbs[0].end():verbs[-1].start()]):
        return line   # two values stated (`the minimum is 12 and the maximum is 13`): no one answer
    subject = s[:verbs[-1].start()]
    if not _WORD.search(subject) and not _LETTER_MATH.search(subject):   # `$x$ is 12`, never `$13$ is 12`
        return line
    value = s[verbs[-1].end():].strip()
    if value and _WORD.search(value):   # words after the value: only a unit (`is 120 cubic units`)
        norm = clean(value)
        return value if norm.unit and not norm.prose and not _WORD.search(norm.text) else line
    return value or line


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
