"""Test specs of the code reward: what a `tests` column holds, validated and normalised.

A spec is JSON text or an already-decoded dict:
    {"kind": "stdio", "cases": [{"stdin": "1 2", "stdout": "3"}], "hidden": [...]}
    {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "kwargs": {}, "expected": 2}]}
    {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert f(0) == 1"]}
"hidden" cases never appear in prompts but always run, so hard-coding the visible answers fails. Any
kind may add "prelude": Python the sandbox runs before the program, in its namespace (HumanEval: the
prompt's imports and helpers, which the program may use or redefine; rlvr.tasks.humaneval). Assert
test code is compiled here for the parent to run (rlvr.rewards.code.checks); none of it enters the sandbox.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from rlvr.rewards.code.checks import TestCode, compile_test

KINDS = ("stdio", "function", "assert")
_KEYS = {"kind", "cases", "hidden", "entry_point", "asserts", "prelude"}
_FUTURE = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*$", re.M)


@dataclass(kw_only=True, frozen=True)
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


@dataclass(kw_only=True, frozen=True)
class Spec:
    kind: str
    cases: tuple[Case, ...]
    entry_point: str | None = None
    prelude: str = ""  # dataset code run in the sandbox before the program
    text: str = field(default="", compare=False, repr=False)  # assert specs: the spec as JSON, for
                                                              # the judge worker to parse again



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
    if kind == "assert" and not any(calls_candidate(c.test) for c in cases):
        raise ValueError("tests spec (assert) never calls a function of the candidate, so every program "
                         "passes it; if the function is named like a builtin (max, sorted, sum), give that "
                         "name as 'entry_point'")
    if kind == "assert":   # what the judge worker parses again: the validated fields, as JSON
        text = json.dumps({"kind": kind, "asserts": shown, "hidden": hidden, "prelude": prelude,
                           **({"entry_point": entry} if entry is not None else {})})
        return Spec(kind=kind, cases=cases, entry_point=entry, prelude=prelude, text=text)
    return Spec(kind=kind, cases=cases, entry_point=entry, prelude=prelude)


def calls_candidate(test: TestCode) -> bool:
    """Does this test call any function of the candidate (a free name, or check(candidate))?"""
    return test.calls_candidate


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
    return Case(number=n, hidden=hidden, stdin=stdin, stdout=stdout)


def _function_case(item, n: int, hidden: bool, kind: str, entry: str | None) -> Case:
    item = _fields(item, n, kind, ("expected",))
    args, kwargs = item.get("args", []), item.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError(f"tests spec (function) case {n}: 'args' must be a list, 'kwargs' an object")
    return Case(number=n, hidden=hidden, args=args, kwargs=kwargs, expected=item["expected"])


def _assert_case(item, n: int, hidden: bool, kind: str, entry: str | None) -> Case:
    if not isinstance(item, str):
        raise ValueError(f"tests spec (assert) case {n} must be a string of Python")
    try:
        test = compile_test(item, f"tests spec (assert) case {n}", entry)
    except SyntaxError as e:
        raise ValueError(f"tests spec (assert) case {n} does not parse: {e.msg}") from None
    return Case(number=n, hidden=hidden, test=test)
