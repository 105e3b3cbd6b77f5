"""Code-test reward: run the completion's last Python code block against a test spec, sandboxed.

The `tests` column holds a spec (rlvr.rewards.code.spec: stdio, function or assert cases, visible and
hidden). Score 1 when every case passes, else 0; `make_code_tests(partial=True)` gives the fraction.

The parent decides every check, never trusting the program it judges: the sandbox only loads the program and
answers calls with plain data (rlvr.sandbox.harness, rlvr.sandbox.program); expected values, test
sources and every comparison stay here. Asserts and HumanEval-style `def check(candidate): ...` test code run
in this process's side of the sandbox with the candidate's functions as proxies (rlvr.rewards.code.checks): in a
killable worker process (rlvr.rewards.code.judge) that gives the whole check a wall clock, since the replies
they run on are hostile data. stdout is compared here.
"""
from __future__ import annotations

import os
import re
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace

from rlvr.rewards.base import Verdict, batch_form
from rlvr.text import clean_reason
from rlvr.rewards.code.checks import UndecidableSpec
from rlvr.rewards.workers import current
from rlvr.rewards.code.outcomes import (CaseOutcome, CodeTestsConfig, same, program_outcomes,  # same: part of this API
                                       stdio_outcomes)
from rlvr.rewards.code.spec import Spec, parse_spec, with_prelude  # parse_spec: part of this API
from rlvr.sandbox.limits import Sandbox, SandboxLimits
from rlvr.sandbox.outcome import FAILURE_KINDS, LIMIT, PROGRAM
from rlvr.sandbox.run import launcher, unsafe_requested

_PY_LANGS = ("", "python", "py", "python3")
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$")
_CLOSE_FENCE = re.compile(r"^[ \t]*```[ \t]*$")


# ---- extraction --------------------------------------------------------------------------------

def last_code_block(text: str) -> str | None:
    """The last closed ```python / ```py / ``` fenced block, dedented; None when there is none."""
    blocks, lang, body = [], None, []
    for line in text.split("\n"):
        if lang is None:
            m = _OPEN_FENCE.match(line)
            if m:
                lang, body = m.group(1).lower(), []
        elif _CLOSE_FENCE.match(line):
            if lang in _PY_LANGS:
                blocks.append(textwrap.dedent("\n".join(body)))
            lang = None
        else:
            body.append(line)
    return blocks[-1] if blocks else None

# ---- judging -----------------------------------------------------------------------

def _worker_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[CaseOutcome]:
    """program_outcomes in a judge worker, killed past the check's wall clock. The reply is read as plain
    data: a kind that is not one the sandbox names counts as a sandbox error."""
    sandbox = replace(cfg.sandbox, unsafe=unsafe_requested(cfg.sandbox))   # the worker's environment is bare
    reply = current().judge.check({"program": program, "tests": spec.text, "partial": cfg.partial,
                                 "limits": asdict(cfg.limits), "sandbox": asdict(sandbox)},
                                cfg.limits.wall_s + cfg.test_code_s)
    if "spec_error" in reply:
        raise UndecidableSpec(reply["spec_error"])
    if "failure" in reply:
        return [(False, str(reply["failure"]), _kind(reply.get("kind")))]
    return [(True, "", "") if ok is True else (False, str(why), _kind(kind))
            for ok, why, kind in reply["outcomes"]]


def _kind(kind) -> str:
    return kind if kind in FAILURE_KINDS else LIMIT


# What happened to one completion (Verdict.outcome; the code/<outcome>_frac metrics): passed; visible_only (a
# hidden case failed after the visible ones passed: what special-casing the examples looks like); no_code; and a
# failure's kind as its runner reported it (rlvr.sandbox.outcome.FAILURE_KINDS): syntax_error, timeout (time or CPU
# limit), sandbox_error (a limit or an abnormal end), wrong (any other failed case, exception or missing function).
CODE_OUTCOMES = ("passed", "wrong", "visible_only", "no_code", "syntax_error", "timeout", "sandbox_error")


def _outcome_of(spec: Spec, outcomes: list[CaseOutcome]) -> str:
    """Verdict.outcome of a failed program, from the run itself: visible_only when the first failure is
    a hidden case, failed by the program's own answer, that visible cases before it passed (outcomes are
    per case, in the spec's order, up to the first failure), else the kind its runner reported."""
    i, kind = next((i, kind) for i, (ok, _, kind) in enumerate(outcomes) if not ok)
    shown = [c for c in spec.cases[:i] if not c.hidden]
    if kind == PROGRAM and i < len(spec.cases) and spec.cases[i].hidden and shown:
        return "visible_only"
    return kind


def judge(program: str, spec: Spec, cfg: CodeTestsConfig) -> Verdict:
    """Score one extracted program against a parsed spec."""
    run = {"stdio": stdio_outcomes, "assert": _worker_outcomes}.get(spec.kind, program_outcomes)
    outcomes = run(with_prelude(spec.prelude, program), spec, cfg)
    n = len(spec.cases)
    passed = sum(ok for ok, _, _ in outcomes)
    if passed == n:
        return Verdict(1.0, f"passed {n}/{n}", program, outcome="passed")
    first = clean_reason(next(why for ok, why, _ in outcomes if not ok))  # runs stop only after a failure
    outcome = _outcome_of(spec, outcomes)
    if cfg.partial:
        return Verdict(passed / n, f"passed {passed}/{n}; {first}", program, outcome=outcome)
    return Verdict(0.0, first, program, outcome=outcome)


def _verdict_parsed(cfg: CodeTestsConfig, completion: str, spec: Spec) -> Verdict:
    program = last_code_block(completion)
    if program is None:
        return Verdict(0.0, "no code block", outcome="no_code")
    if not program.strip():
        return Verdict(0.0, "empty code block", program, outcome="no_code")
    return judge(program, spec, cfg)


def _verdicts(cfg: CodeTestsConfig, texts: list[str], tests_column: list) -> list[Verdict]:
    """Parse every spec first (a malformed one raises before anything runs), then run the items
    on a thread pool: each item is its own sandboxed subprocess with its own limits."""
    if len(texts) != len(tests_column):
        raise ValueError(f"{len(texts)} completions but {len(tests_column)} tests specs")
    specs = [parse_spec(t) for t in tests_column]
    if not texts:
        return []
    launcher(cfg.sandbox, cfg.limits)  # refuse now, once, when there is no sandbox
    workers = min(cfg.workers or max(2, os.cpu_count() or 2), len(texts))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-tests") as pool:
        return list(pool.map(lambda ts: _verdict_parsed(cfg, *ts), zip(texts, specs)))


def make_code_tests(partial: bool = False, timeout_s: float | None = None,
                    limits: SandboxLimits | None = None, sandbox: Sandbox | None = None,
                    workers: int | None = None, test_code_s: float = CodeTestsConfig.test_code_s):
    """A code-test reward; partial=True scores the fraction of cases passed. timeout_s sets both
    the wall-clock and the CPU limit of each program run; test_code_s is CodeTestsConfig's."""
    limits = limits or SandboxLimits()
    if timeout_s is not None:
        limits = replace(limits, wall_s=timeout_s, cpu_s=timeout_s)
    cfg = CodeTestsConfig(partial=partial, limits=limits, sandbox=sandbox or Sandbox(), workers=workers,
                          test_code_s=test_code_s)

    def verdict(completion: str, tests) -> Verdict:
        return _verdict_parsed(cfg, completion, parse_spec(tests))

    def verdicts(texts: list[str], tests_column: list) -> list[Verdict]:
        return _verdicts(cfg, texts, tests_column)

    verdict.__name__ = "code_tests_partial_verdict" if partial else "code_tests_verdict"
    verdict.__doc__ = code_tests_verdict.__doc__
    return batch_form(verdict, ("tests",), verdicts_fn=verdicts, config=cfg, checks_correctness=True,
                      outcomes=CODE_OUTCOMES)


_DEFAULT = CodeTestsConfig()


def code_tests_verdict(completion: str, tests) -> Verdict:
    """1.0 when the completion's last Python code block passes every case of the tests spec."""
    return _verdict_parsed(_DEFAULT, completion, parse_spec(tests))


def _parallel_verdicts(texts: list[str], tests_column: list) -> list[Verdict]:
    return _verdicts(_DEFAULT, texts, tests_column)


code_tests = batch_form(code_tests_verdict, ("tests",), verdicts_fn=_parallel_verdicts, config=_DEFAULT,
                        checks_correctness=True, outcomes=CODE_OUTCOMES)
__all__ = ["CODE_OUTCOMES", "CodeTestsConfig", "Spec", "code_tests", "code_tests_verdict",
           "last_code_block", "make_code_tests", "parse_spec", "same", "program_outcomes"]
