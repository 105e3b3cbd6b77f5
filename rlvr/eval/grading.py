"""Grading completions against their problems, for every evaluation: maths problems by their answer,
code problems (a `tests` spec) by running the program against the tests in the sandbox.

Each grade has `correct` (the strict verdict: what the rewards pay), `reason`, `format` (the stated form:
the answer line or tag for maths, a closed ```python block for code) and `lenient` with
`lenient_answer` (format-free, a diagnostic: the last number or answer for maths; for code the same
tests run on the program however it was written down: an unclosed block, or bare code).

With a user grader (rlvr.eval.grader), `correct` and `reason` are the user's verdict (`score` its raw
score) and `lenient` is right by the user's grader or by the built-in format-free grade, so a strict
pass stays a format-free pass and the flips count what the user's grader accepts."""
from __future__ import annotations

import re

from rlvr.eval.grader import Grader, user_grades
from rlvr.eval.lenient import lenient_verdict
from rlvr.rewards import format_reward, math_accuracy
from rlvr.tasks import Problem

_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py)?[ \t]*$", re.MULTILINE)
_CODE_START = re.compile(r"^(?:def |class |import |from \w)", re.MULTILINE)


def loose_program(text: str) -> str | None:
    """The program a completion holds, however it is written: the last closed ```python block, else
    what follows the last opening fence (cut off, or never closed), else the text from its first line
    that starts a definition or an import; None when there is no code at all."""
    from rlvr.rewards.code import last_code_block   # the code reward loads the sandbox: only for code

    block = last_code_block(text)
    if block is not None:
        return block
    fences = list(_FENCE.finditer(text))
    if fences:
        return text[fences[-1].end():].strip("\n") or None
    start = _CODE_START.search(text)
    return text[start.start():] if start else None


def _maths(p: Problem, text: str) -> dict:
    acc, fmt, free = math_accuracy.verdict(text, p.answer), format_reward.verdict(text), lenient_verdict(text, p.answer)
    return {"correct": acc.score, "reason": acc.reason, "format": fmt.score, "lenient": free.score,
            "lenient_answer": free.extracted}


def grade(problems: list[Problem], texts: list[str], grader: Grader | None = None,
          inputs: tuple[list, dict[str, list]] | None = None) -> list[dict]:
    """One grade per (problem, completion); the code problems' programs run in one batch across the
    sandbox pool, strict and format-free together. A strict pass is always a format-free pass. A user
    grader's verdict replaces the strict one (module docstring); `inputs`, the episodes' (completions,
    columns) as training's rewards get them (rlvr.envs.episodes.reward_inputs), reach it as they are."""
    grades = builtin_grades(problems, texts)
    if grader is None or not grader.user:
        return grades
    for g, (correct, score, reason) in zip(grades, user_grades(grader, problems, texts, inputs)):
        g.update(correct=correct, score=score, reason=reason, lenient=max(g["lenient"], correct))
    return grades


def builtin_grades(problems: list[Problem], texts: list[str]) -> list[dict]:
    """grade() by the built-in checker."""
    grades: list[dict | None] = [None if p.tests else _maths(p, t) for p, t in zip(problems, texts)]
    code = [i for i, p in enumerate(problems) if p.tests]
    if code:
        from rlvr.rewards.code import code_tests, last_code_block   # loads the sandbox: only for code

        loose = [loose_program(texts[i]) for i in code]
        wrapped = [texts[i] for i in code] + [f"```python\n{prog}\n```" if prog else "" for prog in loose]
        tests = [problems[i].tests for i in code] * 2
        verdicts = code_tests.verdicts(wrapped, tests=tests)
        for j, i in enumerate(code):
            strict, free = verdicts[j], verdicts[len(code) + j]
            grades[i] = {"correct": strict.score, "reason": strict.reason,
                         "format": float(last_code_block(texts[i]) is not None),
                         "lenient": max(strict.score, free.score), "lenient_answer": loose[j]}
    return grades

