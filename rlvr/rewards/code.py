"""Code-test reward: run the completion's last Python code block against a test spec, sandboxed.

The `tests` column holds a spec, as JSON text or an already-decoded dict:
    {"kind": "stdio", "cases": [{"stdin": "1 2", "stdout": "3"}], "hidden": [...]}
    {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "kwargs": {}, "expected": 2}]}
    {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert f(0) == 1"]}
"hidden" cases never appear in prompts but always run, so hard-coding the visible answers fails. Score 1 when every
case passes, else 0; `make_code_tests(partial=True)` gives the fraction. Any kind may add "prelude":
Python the sandbox runs before the program, in its namespace (HumanEval: the prompt's imports and
helpers, which the program may use or redefine; rlvr.tasks.humaneval).

The parent decides every check (issue 13): the sandbox only loads the program and answers calls with
plain data (rlvr.rewards.harness, rlvr.rewards.session); expected values, test sources and every
comparison stay here. Asserts and HumanEval-style `def check(candidate): ...` test code run in this
process with the candidate's functions as proxies (rlvr.rewards.checks). stdout is compared here.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from rlvr.rewards import harness
from rlvr.rewards.base import Verdict, batch_form, clean_reason
from rlvr.rewards.checks import Runner, TestCode, Undecidable, compile_test, run_test
from rlvr.rewards.sandbox import Sandbox, SandboxLimits, launcher, run_harness
from rlvr.rewards.session import Session

KINDS = ("stdio", "function", "assert")
_KEYS = {"kind", "cases", "hidden", "entry_point", "asserts", "prelude"}
_PY_LANGS = ("", "python", "py", "python3")
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$")
_CLOSE_FENCE = re.compile(r"^[ \t]*```[ \t]*$")
_FUTURE = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*$", re.M)


@dataclass(frozen=True)
class Case:
    """One test case. stdio: stdin/stdout; function: args/kwargs/expected; assert: test code."""

    number: int
    hidden: bool
    stdin: str = ""
    stdout: str = ""
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    expected: object = None
    test: TestCode | None = None


@dataclass(frozen=True)
class Spec:
    kind: str
    cases: tuple[Case, ...]
    entry_point: str | None = None
    prelude: str = ""  # dataset code run in the sandbox before the program


@dataclass(frozen=True)
class CodeTestsConfig:
    partial: bool = False
    limits: SandboxLimits = SandboxLimits()
    sandbox: Sandbox = Sandbox()
    workers: int | None = None   # None: max(2, CPU count)


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


# ---- specs -------------------------------------------------------------------------------------

def parse_spec(tests) -> Spec:
    """Validate and normalise a spec; a malformed one raises ValueError naming what is wrong."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as e:
            raise ValueError(f"tests spec is not valid JSON: {e}") from None
    if not isinstance(tests, dict):
        raise ValueError(f"tests spec must be a JSON object, got {type(tests).__name__}")
    if "kind" not in tests:
        raise ValueError("tests spec is missing key 'kind'")
    kind = tests["kind"]
    if kind not in KINDS:
        raise ValueError(f"tests spec has unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
    unknown = set(tests) - _KEYS
    if unknown:
        raise ValueError(f"tests spec ({kind}) has unknown keys {sorted(unknown)}: allowed {sorted(_KEYS)}")
    shown_key = "asserts" if kind == "assert" else "cases"
    shown, hidden = _list(tests, shown_key, kind, required=True), _list(tests, "hidden", kind)
    entry = tests.get("entry_point")
    if kind == "function" and (not isinstance(entry, str) or not entry.isidentifier()):
        raise ValueError("tests spec (function) is missing key 'entry_point' (a function name)")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        raise ValueError(f"tests spec ({kind}) key 'entry_point' must be a function name")
    prelude = _prelude(tests, kind)
    make = {"stdio": _stdio_case, "function": _function_case, "assert": _assert_case}[kind]
    cases = tuple(make(item, n, n > len(shown), kind, entry)
                  for n, item in enumerate(shown + hidden, start=1))
    if not cases:
        raise ValueError(f"tests spec ({kind}) has no cases")
    return Spec(kind, cases, entry, prelude)


def _prelude(tests: dict, kind: str) -> str:
    prelude = tests.get("prelude", "")
    if not isinstance(prelude, str):
        raise ValueError(f"tests spec ({kind}) key 'prelude' must be a string of Python")
    try:
        compile(prelude, "<prelude>", "exec")
    except SyntaxError as e:
        raise ValueError(f"tests spec ({kind}) key 'prelude' does not parse: {e.msg} (line {e.lineno})") from None
    return prelude


def with_prelude(prelude: str, program: str) -> str:
    """The program to run: the prelude, then the program (which may redefine anything in it); the
    program's `from __future__` imports go first, where Python requires them."""
    if not prelude:
        return program
    return "\n".join(_FUTURE.findall(program) + [prelude, _FUTURE.sub("", program)])


def _list(tests: dict, key: str, kind: str, required: bool = False) -> list:
    if key not in tests:
        if required:
            raise ValueError(f"tests spec ({kind}) is missing key {key!r}")
        return []
    if not isinstance(tests[key], list):
        raise ValueError(f"tests spec ({kind}) key {key!r} must be a list")
    return tests[key]


def _fields(item, n: int, kind: str, required: tuple[str, ...]) -> dict:
    if not isinstance(item, dict):
        raise ValueError(f"tests spec ({kind}) case {n} must be an object")
    for key in required:
        if key not in item:
            raise ValueError(f"tests spec ({kind}) case {n} is missing key {key!r}")
    return item


def _stdio_case(item, n: int, hidden: bool, kind: str, entry: str | None) -> Case:
    item = _fields(item, n, kind, ("stdout",))
    stdin, stdout = item.get("stdin", ""), item["stdout"]
    if not isinstance(stdin, str) or not isinstance(stdout, str):
        raise ValueError(f"tests spec (stdio) case {n}: 'stdin' and 'stdout' must be strings")
    return Case(n, hidden, stdin=stdin, stdout=stdout)


def _function_case(item, n: int, hidden: bool, kind: str, entry: str | None) -> Case:
    item = _fields(item, n, kind, ("expected",))
    args, kwargs = item.get("args", []), item.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError(f"tests spec (function) case {n}: 'args' must be a list, 'kwargs' an object")
    return Case(n, hidden, args=args, kwargs=kwargs, expected=item["expected"])


def _assert_case(item, n: int, hidden: bool, kind: str, entry: str | None) -> Case:
    if not isinstance(item, str):
        raise ValueError(f"tests spec (assert) case {n} must be a string of Python")
    try:
        test = compile_test(item, f"tests spec (assert) case {n}", entry)
    except SyntaxError as e:
        raise ValueError(f"tests spec (assert) case {n} does not parse: {e.msg}") from None
    return Case(n, hidden, test=test)


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


def _session_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[tuple[bool, str]]:
    """One sandbox for the program; every call over its pipes, every check decided here."""
    with Session(program, cfg.limits, cfg.sandbox) as session:
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
                raise ValueError(f"tests spec (assert) case {case.number} cannot be decided outside the "
                                 f"sandbox: it {e.args[0]}; rewrite it as calls on plain data") from None
            outcomes.append((True, "") if ok else (False, _case_reason(case, why)))
            if not ok and not cfg.partial:
                break
        return outcomes


def _function_outcomes(session: Session, spec: Spec) -> list[tuple[bool, str]]:
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
    run = _stdio_outcomes if spec.kind == "stdio" else _session_outcomes
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
                    workers: int | None = None):
    """A code-test reward; partial=True scores the fraction of cases passed. timeout_s sets both
    the wall-clock and the CPU limit of each program run."""
    limits = limits or SandboxLimits()
    if timeout_s is not None:
        limits = replace(limits, wall_s=timeout_s, cpu_s=timeout_s)
    cfg = CodeTestsConfig(partial, limits, sandbox or Sandbox(), workers)

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
           "last_code_block", "make_code_tests", "parse_spec", "same"]
