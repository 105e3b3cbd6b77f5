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
from dataclasses import asdict, dataclass, replace

from rlvr.sandbox import harness
from rlvr.rewards.base import Verdict, batch_form, clean_reason
from rlvr.rewards.code.checks import Runner, Undecidable, UndecidableSpec, run_test
from rlvr.rewards.code.spec import Case, Spec, parse_spec, with_prelude  # parse_spec: part of this API
from rlvr.rewards.code.judge import shared_pool
from rlvr.sandbox.run import Sandbox, SandboxLimits, launcher, run_harness, unsafe_requested
from rlvr.sandbox.program import ProgramSession

_PY_LANGS = ("", "python", "py", "python3")
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$")
_CLOSE_FENCE = re.compile(r"^[ \t]*```[ \t]*$")


@dataclass(frozen=True)
class CodeTestsConfig:
    partial: bool = False
    limits: SandboxLimits = SandboxLimits()
    sandbox: Sandbox = Sandbox()
    workers: int | None = None   # None: max(2, CPU count)
    test_code_s: float = 2.0     # what test code may add to a program's wall clock: an assert spec's
                                 # whole check is killed after limits.wall_s + test_code_s


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


# ---- comparison --------------------------------------------------------------------------------

def same(expected, got) -> bool:
    """Strict equality on decoded plain data: bools are not numbers, 1 == 1.0, a tuple is not a
    list, lists and dicts by content. Both sides are data the parent built, so no user `__eq__`
    is ever called."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return expected == got
    if type(expected) is not type(got):
        return False
    if isinstance(expected, (list, tuple)):
        return len(expected) == len(got) and all(same(a, b) for a, b in zip(expected, got))
    if isinstance(expected, dict):
        return expected.keys() == got.keys() and all(same(expected[k], got[k]) for k in expected)
    return expected == got


def normalise_output(text: str) -> str:
    """Trailing whitespace at line ends and at the end is the only leniency."""
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip()


def _clip(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


# ---- running and judging -----------------------------------------------------------------------

def _stdio_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[tuple[bool, str]]:
    """One run per case, so each gets real stdin and stdout. Stops at the first failure, or in
    partial mode at the first time-out (so one hung program costs one time limit)."""
    outcomes = []
    for case in spec.cases:
        r = run_harness({"kind": "stdio", "source": program}, case.stdin.encode("utf-8"),
                        cfg.limits, cfg.sandbox)
        failure = r.failure(cfg.limits)
        if failure is None:
            got, want = normalise_output(r.stdout.decode("utf-8", "replace")), normalise_output(case.stdout)
            outcomes.append((True, "") if got == want else (False, _mismatch(case, want, got, text=True)))
        else:
            outcomes.append((False, failure))
        if not outcomes[-1][0] and (not cfg.partial or r.timed_out):
            break
    return outcomes


def session_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[tuple[bool, str]]:
    """One sandbox for the program; every call over its pipes, every check decided on this side
    (for test code: in a judge worker, `_worker_outcomes`)."""
    with ProgramSession(program, cfg.limits, cfg.sandbox) as session:
        if session.load_error is not None:
            return [(False, _load_reason(*session.load_error))] * len(spec.cases)
        if spec.kind == "function":
            return _function_outcomes(session, spec)
        runner = Runner(session, [c for case in spec.cases for c in case.test.prefetch])
        outcomes = []
        for case in spec.cases:
            try:
                ok, why = run_test(case.test, runner, spec.entry_point)
            except Undecidable as e:
                raise UndecidableSpec(f"tests spec (assert) case {case.number} cannot be decided outside the "
                                 f"sandbox: it {e.args[0]}; rewrite it as calls on plain data") from None
            outcomes.append((True, "") if ok else (False, _case_reason(case, why)))
            if not ok and not cfg.partial:
                break
        return outcomes


def _worker_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[tuple[bool, str]]:
    """session_outcomes in a judge worker, killed past the check's wall clock."""
    sandbox = replace(cfg.sandbox, unsafe=unsafe_requested(cfg.sandbox))   # the worker's environment is bare
    reply = shared_pool().check({"program": program, "tests": spec.text, "partial": cfg.partial,
                                 "limits": asdict(cfg.limits), "sandbox": asdict(sandbox)},
                                cfg.limits.wall_s + cfg.test_code_s)
    if "spec_error" in reply:
        raise UndecidableSpec(reply["spec_error"])
    if "failure" in reply:
        return [(False, reply["failure"])]
    return [(bool(ok), str(why)) for ok, why in reply["outcomes"]]


def _function_outcomes(session: ProgramSession, spec: Spec) -> list[tuple[bool, str]]:
    name = spec.entry_point
    replies = session.call([[name, harness.encode(c.args), harness.encode(c.kwargs)] for c in spec.cases])
    outcomes = []
    for case, reply in zip(spec.cases, replies):
        tag = reply[0]
        if tag == "v":
            ok = same(case.expected, reply[1])
            outcomes.append((True, "") if ok else (False, _mismatch(case, case.expected, reply[1])))
        elif tag == "e":
            why = "memory limit" if reply[2] == "MemoryError" else \
                "raised " + (f"{reply[1]}: {reply[3]}" if reply[3] else reply[1])
            outcomes.append((False, _case_reason(case, why)))
        elif tag == "n":
            outcomes.append((False, _case_reason(case, f"returned a {reply[1]}, not plain data")))
        elif tag == "m":
            outcomes.append((False, f"no function named {name}"))
        else:
            outcomes.append((False, _case_reason(case, reply[1])))
    return outcomes


def _load_reason(type_name: str, base: str, message: str) -> str:
    if base == "MemoryError":
        return "memory limit"
    return "crashed: " + (f"{type_name}: {message}" if message else type_name)


_WHOLE_RUN = ("timed out", "memory limit", "output too large", "crashed", "no function named",
              "malformed answer")


CODE_OUTCOMES = ("passed", "wrong", "visible_only", "no_code", "syntax_error", "timeout", "sandbox_error")
_SANDBOX = ("memory limit", "output too large", "malformed answer", "no result", "crashed: killed by")


def code_outcome(reason: str) -> str:
    """What happened to one completion, read from its verdict's reason (the first failure decides):
    passed; visible_only (every visible case passed, a hidden one failed: what special-casing the
    examples looks like); no_code; syntax_error; timeout (wall clock or CPU limit); sandbox_error (a
    limit or an abnormal end: memory, output size, killed, no or malformed answer); wrong (any other
    failed case, exception or missing function)."""
    if reason.startswith("passed") and ";" not in reason:
        return "passed"
    first = reason.split("; ", 1)[1] if reason.startswith("passed") else reason
    if first in ("no code block", "empty code block"):
        return "no_code"
    if "SyntaxError" in first or "IndentationError" in first:
        return "syntax_error"
    if "timed out" in first or "cpu time limit" in first:
        return "timeout"
    if any(s in first for s in _SANDBOX):
        return "sandbox_error"
    # case 1 hidden: the spec shows no cases (HumanEval's check), so there were no visible ones to pass
    if first.startswith("failed case") and "(hidden)" in first.split(":", 1)[0] \
            and not first.startswith("failed case 1 "):
        return "visible_only"
    return "wrong"


def _case_reason(case: Case, why: str) -> str:
    """Hidden cases' reasons carry no exception message: it could quote the hidden inputs."""
    if why.startswith(_WHOLE_RUN):
        return why
    if case.hidden and why.startswith(("raised ", "test raised ")):
        why = why.split(":", 1)[0]
    return f"failed case {case.number}{' (hidden)' if case.hidden else ''}: {why}"


def _mismatch(case: Case, want, got, text: bool = False) -> str:
    if case.hidden:  # reasons are logged with samples; keep hidden answers out of them
        return f"failed case {case.number} (hidden): wrong answer"
    show = (lambda v: repr(_clip(v))) if text else (lambda v: _clip(repr(v)))
    return f"failed case {case.number}: expected {show(want)}, got {show(got)}"


def judge(program: str, spec: Spec, cfg: CodeTestsConfig) -> Verdict:
    """Score one extracted program against a parsed spec."""
    run = {"stdio": _stdio_outcomes, "assert": _worker_outcomes}.get(spec.kind, session_outcomes)
    outcomes = run(with_prelude(spec.prelude, program), spec, cfg)
    n = len(spec.cases)
    passed = sum(ok for ok, _ in outcomes)
    if passed == n:
        return Verdict(1.0, f"passed {n}/{n}", program)
    first = clean_reason(next(why for ok, why in outcomes if not ok))  # runs stop only after a failure
    if cfg.partial:
        return Verdict(passed / n, f"passed {passed}/{n}; {first}", program)
    return Verdict(0.0, first, program)


def _verdict_parsed(cfg: CodeTestsConfig, completion: str, spec: Spec) -> Verdict:
    program = last_code_block(completion)
    if program is None:
        return Verdict(0.0, "no code block")
    if not program.strip():
        return Verdict(0.0, "empty code block", program)
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
    cfg = CodeTestsConfig(partial, limits, sandbox or Sandbox(), workers, test_code_s)

    def verdict(completion: str, tests) -> Verdict:
        return _verdict_parsed(cfg, completion, parse_spec(tests))

    def verdicts(texts: list[str], tests_column: list) -> list[Verdict]:
        return _verdicts(cfg, texts, tests_column)

    verdict.__name__ = "code_tests_partial_verdict" if partial else "code_tests_verdict"
    verdict.__doc__ = code_tests_verdict.__doc__
    reward = batch_form(verdict, ("tests",), verdicts_fn=verdicts)
    reward.config = cfg
    reward.checks_correctness = True  # pass rates and the curriculum read it (rlvr.rewards.strict_rewards)
    reward.code_outcome = code_outcome  # code/<outcome>_frac metrics read it (rlvr/train/metrics.py)
    return reward


_DEFAULT = CodeTestsConfig()


def code_tests_verdict(completion: str, tests) -> Verdict:
    """1.0 when the completion's last Python code block passes every case of the tests spec."""
    return _verdict_parsed(_DEFAULT, completion, parse_spec(tests))


def _parallel_verdicts(texts: list[str], tests_column: list) -> list[Verdict]:
    return _verdicts(_DEFAULT, texts, tests_column)


code_tests = batch_form(code_tests_verdict, ("tests",), verdicts_fn=_parallel_verdicts)
code_tests.checks_correctness = True
code_tests.code_outcome = code_outcome
__all__ = ["CODE_OUTCOMES", "CodeTestsConfig", "Spec", "code_outcome", "code_tests", "code_tests_verdict",
           "last_code_block", "make_code_tests", "parse_spec", "same", "session_outcomes"]
