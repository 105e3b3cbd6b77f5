"""The sandboxed code-test reward: positive controls, a battery of attacks that must score 0
within their time limit, extraction, the prelude, the missing-bubblewrap refusal, parallelism (specs:
test_code_spec.py)."""
import json
import logging
import threading
import time
from pathlib import Path

import pytest

from rlvr.errors import RlvrError
from rlvr.rewards.code import reward as code
from rlvr.sandbox import run as sandbox
from rlvr.rewards.base import Verdict
from rlvr.rewards.code import code_tests, last_code_block, make_code_tests, parse_spec, same
from rlvr.sandbox.run import Sandbox, SandboxUnavailable
from tests.conftest import python_block, returns_within

from code_cases import ASSERT, ATTACKS, FN, STDIO, STMT  # tests/rewards/code_cases.py

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)


def explained_block(src: str) -> str:
    """The program after a line of prose: the code block is found wherever it is."""
    return python_block(src, before="Here is my solution.\n")


HANG_S = 60   # a hang backstop: a limit that did not hold lets an attack sleep its 100 s


def verdict_of(src: str, spec, rw=reward) -> Verdict:
    return returns_within(HANG_S, lambda: rw.verdicts([explained_block(src)], tests=[spec])[0])


def procs_matching(marker: str) -> list[str]:
    """Host processes whose name or command line contains marker."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                text = (p / "comm").read_text() + (p / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if marker in text:
                found.append(p.name)
    return found


def assert_gone(marker: str) -> None:
    for _ in range(20):
        if not procs_matching(marker):
            return
        time.sleep(0.1)
    raise AssertionError(f"processes survived the run: {procs_matching(marker)}")


# ---- positive controls -------------------------------------------------------------------------

DESCRIBE = {"kind": "function", "entry_point": "describe", "cases": [
    {"args": [[1, 2, 3]], "kwargs": {"scale": 0.5},
     "expected": {"sum": 3.0, "items": [0.5, 1.0, 1.5], "name": "list", "missing": None}},
    {"args": [[]], "expected": {"sum": 0, "items": [], "name": "empty", "missing": None}},
    {"args": [None], "expected": None}], "hidden": [{"args": [[4]], "kwargs": {"scale": 2}, "expected":
                                                     {"sum": 8, "items": [8], "name": "list", "missing": None}}]}
DESCRIBE_SRC = """
    def describe(xs, scale=1.0):
        if xs is None:
            return None
        items = [x * scale for x in xs]
        return {"sum": sum(items), "items": items, "name": "list" if xs else "empty", "missing": None}
"""


@pytest.mark.parametrize("spec, src", [
    (STDIO, "a, b = map(int, input().split())\nprint(a + b)"),
    (FN, "def f(a, b=0):\n    return a + b"),
    (DESCRIBE, DESCRIBE_SRC),
    (ASSERT, "def f(a, b):\n    return a + b"),
    (STMT, "def f(xs):\n    return list(xs)"),
    (json.dumps(FN), "def f(a, b=0):\n    return a + b"),
], ids=["stdio", "function", "function-types-kwargs", "assert", "assert-statements", "json-spec"])
def test_correct_programs_pass(spec, src):
    v = verdict_of(src, spec)
    n = len(parse_spec(spec).cases)
    assert (v.score, v.reason) == (1.0, f"passed {n}/{n}")


def test_public_reward_floats_chat_messages_and_default_limits():
    answer = explained_block("def f(a, b=0): return a + b")
    chat = [[{"role": "user", "content": "add"}, {"role": "assistant", "content": answer}]]
    scores = code_tests(chat + ["no code here"], tests=[FN, FN])
    assert scores == [1.0, 0.0] and all(isinstance(s, float) for s in scores)
    assert code_tests.__name__ == "code_tests" and code_tests.columns == ("tests",)
    assert code_tests.verdict(explained_block("print(3)"), STDIO).reason == "failed case 2 (hidden): wrong answer"


def test_partial_scoring_gives_the_exact_fraction():
    partial = make_code_tests(partial=True, timeout_s=LIMIT_S)
    spec = {"kind": "stdio", "cases": [{"stdin": "1 2", "stdout": "3"}, {"stdin": "5 5", "stdout": "10"},
                                       {"stdin": "2 7", "stdout": "9"}]}
    v = verdict_of("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)", spec, partial)
    assert v.score == 2 / 3
    assert v.reason == "passed 2/3; failed case 2: expected '10', got '0'"
    fn = {"kind": "function", "entry_point": "f", "cases": [{"args": [i], "expected": i} for i in range(4)]}
    v = verdict_of("def f(x):\n    return x if x % 2 else 1 / x", fn, partial)
    assert (v.score, v.reason) == (0.5, "passed 2/4; failed case 1: raised ZeroDivisionError: division by zero")


@pytest.mark.parametrize("src, reason", [
    ("def f(a, b=0):\n    return a - b", "failed case 1: expected 3, got -1"),
    ("def f(a, b=0):\n    return str(a + b)", "failed case 1: expected 3, got '3'"),
    ("def f(a, b=0):\n    return a + b == 3", "failed case 1: expected 3, got True"),
    ("def g(a, b):\n    return a + b", "no function named f"),
    ("def f(a, b):\n    return 1 / 0", "failed case 1: raised ZeroDivisionError: division by zero"),
    ("def f(a, b) return", "crashed: SyntaxError: "),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "crashed: killed by SIGKILL"),
], ids=["wrong", "str-not-int", "bool-not-int", "missing-entry-point", "raises", "syntax-error", "killed"])
def test_failure_reasons(src, reason):
    v = verdict_of(src, FN)
    assert v.score == 0.0
    assert v.reason == reason or (reason.endswith(": ") and v.reason.startswith(reason)), v.reason


def test_stdio_is_compared_in_full_with_trailing_whitespace_only():
    spec = {"kind": "stdio", "cases": [{"stdin": "", "stdout": "a b\nc\n"}]}
    assert verdict_of("print('a b   ')\nprint('c\\t')\nprint()\nprint()", spec).score == 1.0
    assert verdict_of("print(' a b')\nprint('c')", spec).score == 0.0          # leading space
    assert verdict_of("print('a b')\nprint()\nprint('c')", spec).score == 0.0  # inner blank line
    assert verdict_of("print('a b')", spec).score == 0.0                       # a prefix is not enough
    assert verdict_of("print('a b\\nc\\nd')", spec).score == 0.0


def test_strict_comparison():
    assert same(1, 1.0) and same({"a": [1, None]}, {"a": [1.0, None]})
    assert not same(1, True) and not same(0, False) and not same(None, 0) and not same("1", 1)
    assert not same([1, 2], [1, 2, 3]) and not same({"a": 1}, {"a": 1, "b": 2})


@pytest.mark.parametrize("src, reason", [
    ("def f(a, b=0):\n    return (a + b,)", "failed case 1: expected [3], got (3,)"),
    ("def f(a, b=0):\n    return {a + b}", "failed case 1: expected [3], got {3}"),
], ids=["tuple-for-list", "set-for-list"])
def test_tuple_is_not_a_list(src, reason):
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [1, 2], "expected": [3]}]}
    v = verdict_of(src, spec)
    assert (v.score, v.reason) == (0.0, reason)


def test_an_int_past_4300_digits_is_a_value_both_ways():
    """Python refuses to write an int of more than 4300 decimal digits as text: such a return value (5736
    digits) must reach the test as itself, and go back in as an argument, not fail as a ValueError."""
    spec = {"kind": "assert", "asserts": ["import math\nassert f(2000) == math.factorial(2000)"],
            "hidden": ["assert f(3) == 6", "assert digits(f(2000)) == 5736"]}
    honest = "import math, sys\nsys.set_int_max_str_digits(0)\ndef f(n):\n    return math.factorial(n)\ndef digits(x):\n    return len(str(x))"
    off_by_one = honest.replace("math.factorial(n)", "math.factorial(n) + (n > 100)")
    # a function spec's wrong answer is shown in its reason, in the trainer: an int too long to write in
    # decimal is said by its size, never a ValueError that would end the whole batch
    fn = {"kind": "function", "entry_point": "f", "cases": [{"args": [3], "expected": 6}, {"args": [4], "expected": [24]}]}
    huge = "def f(n):\n    return 10 ** 5000 if n == 3 else [10 ** 5000]"
    huge_in_list = "def f(n):\n    return 6 if n == 3 else [10 ** 5000]"
    vs = reward.verdicts([explained_block(p) for p in (honest, off_by_one, huge, huge_in_list)],
                         tests=[spec, spec, fn, fn])
    assert [(v.score, v.reason) for v in vs] == [
        (1.0, "passed 3/3"), (0.0, "failed case 1: assertion failed"),
        (0.0, "failed case 1: expected 6, got an int of 16610 bits"),
        (0.0, "failed case 2: expected [24], got a list holding an int too long to show")]


# ---- attacks: every one must score 0, within its time limit ------------------------------------
# The table is in tests/rewards/code_cases.py.


@pytest.mark.parametrize("name", list(ATTACKS), ids=list(ATTACKS))
def test_attack_scores_zero_within_its_limit(name):
    spec, src = ATTACKS[name]
    # a busy attack runs until its CPU time reaches the limit (on a loaded machine the wall clock stretches,
    # up to the backstop of rlvr.sandbox.clock); one that sleeps or waits stops at the limit: verdict_of fails
    # the test when the verdict has not come after HANG_S
    v = verdict_of(src, spec)
    assert v.score == 0.0, v.reason


@pytest.mark.parametrize("name, reason", [
    ("endless-loop", "timed out after 1.0s"),
    ("spinning-processes", "timed out after 1.0s"),
    ("ignore-sigterm", "timed out after 1.0s"),
    ("memory-bomb", "memory limit"),
    ("memory-bomb-list", "memory limit"),
    ("huge-output", "output too large"),
    ("hard-coded-visible-answers", "failed case 2 (hidden): wrong answer"),
    ("frame-walk-calls-harness-report", "failed case 1: expected 3, got 0"),   # nothing to forge
    ("always-equal-object", "failed case 1: returned a Eq, not plain data"),
    ("int-subclass-equal", "failed case 1: returned a I, not plain data"),
    ("str-subclass-equal", "failed case 1: f() returned a S, not plain data"),
    ("metaclass-forged-name", "failed case 1: returned a X, not plain data"),
    ("deep-line-on-the-reply-pipe", "malformed answer from the sandbox"),
    ("stop-itself", "timed out after 1.0s"),
    ("os-exit-before-results", "failed case 1: no result (the program exited before reporting)"),
])
def test_attack_reasons(name, reason):
    spec, src = ATTACKS[name]
    v = verdict_of(src, spec)
    assert v.reason == reason


@pytest.mark.parametrize("name, marker", [("fork-bomb", "rlvrforkbomb"), ("orphan-popen-sleep", "100.4242"),
                                          ("orphan-answers-late", "rlvrorphan")])
def test_no_process_survives(name, marker):
    spec, src = ATTACKS[name]
    if marker == "rlvrorphan":  # name the late answerer so we can look for it
        src = src.replace("os.setsid()", "os.setsid(); open('/proc/self/comm', 'w').write('rlvrorphan')")
    v = verdict_of(src, spec)
    assert v.score == 0.0
    assert_gone(marker)


# ---- extraction ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, program", [
    ("```python\nprint(1)\n```\ntext\n```python\nprint(2)\n```", "print(2)"),
    ("```\nprint(1)\n```", "print(1)"),
    ("```py\nx = 1\n\ny = 2\n```", "x = 1\n\ny = 2"),
    ("```python\nprint(1)\n```\nOutput:\n```text\n1\n```", "print(1)"),   # not a Python block
    ("  ```python\n  def f():\n      return 1\n  ```", "def f():\n    return 1"),
    ("```python\nprint(1)\n```\n```python\nprint(2)", "print(1)"),        # an unclosed block is not one
    ("no code at all", None),
    ("inline ```print(1)``` only", None),
], ids=["last-of-two", "bare-fence", "blank-lines", "skips-other-language", "indented", "unclosed", "none", "inline"])
def test_last_code_block(text, program):
    assert last_code_block(text) == program


def test_no_code_block_verdict():
    v = reward.verdicts(["I would write a loop."], tests=[FN])[0]
    assert (v.score, v.reason, v.extracted) == (0.0, "no code block", None)


# ---- the prelude (HumanEval: the prompt's imports and helpers) -----------------------------------

def test_prelude_runs_before_the_program_which_may_use_or_redefine_it():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [4], "expected": 50}],
            "prelude": "import math\nSCALE = 10\n\ndef g(x):\n    return x + 1"}   # f(4) = SCALE * g(4) = 50
    uses = "def f(x):\n    return SCALE * g(x)"
    redefines = "def g(x):\n    return x\n\ndef f(x):\n    return SCALE * g(x)"   # 10 * 4 = 40
    # `Later` is never defined: only a hoisted __future__ import keeps the annotation from failing
    future = ("from __future__ import annotations\n\n"
              "def f(x: Later) -> int:\n    return int(math.sqrt(50 * SCALE * g(x)))")
    verdicts = [verdict_of(src, spec) for src in (uses, redefines, future)]
    assert [(v.score, v.reason) for v in verdicts] == [
        (1.0, "passed 1/1"), (0.0, "failed case 1: expected 50, got 40"), (1.0, "passed 1/1")]
    assert verdicts[1].extracted == redefines   # the program as written, without the prelude
    assert parse_spec(spec).prelude == spec["prelude"] and parse_spec(FN).prelude == ""


# ---- the missing-bubblewrap refusal and unsafe mode --------------------------------------------

def test_missing_bubblewrap_is_refused_with_an_install_hint(monkeypatch):
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    rw = make_code_tests(sandbox=Sandbox(bwrap="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as info:
        rw([explained_block("print(3)")], tests=[STDIO])
    assert isinstance(info.value, RlvrError) and sandbox.UNSAFE_ENV in str(info.value)
    with pytest.raises(SandboxUnavailable):
        rw.verdict(explained_block("print(3)"), STDIO)


@pytest.mark.parametrize("how", ["env", "parameter"])
def test_unsafe_mode_runs_warns_and_still_limits(how, monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "_warned", set())
    if how == "env":
        monkeypatch.setenv(sandbox.UNSAFE_ENV, "1")
        box = Sandbox(bwrap="/nonexistent/bwrap")
    else:
        box = Sandbox(bwrap="/nonexistent/bwrap", unsafe=True)
    rw = make_code_tests(timeout_s=LIMIT_S, sandbox=box)
    with caplog.at_level(logging.WARNING, logger="rlvr.sandbox.run"):
        v = verdict_of("a, b = map(int, input().split())\nprint(a + b)", STDIO, rw)
    assert v.score == 1.0
    assert any("UNSAFE" in r.message and "apt-get install bubblewrap" in r.message for r in caplog.records)
    v = verdict_of(*reversed(ATTACKS["endless-loop"]), rw)
    # without the parent's view of the run (unsafe mode) RLIMIT_CPU may stop a busy loop first
    assert v.score == 0.0 and v.reason in ("timed out after 1.0s", "failed case 1: cpu time limit"), v
    assert verdict_of(*reversed(ATTACKS["memory-bomb"]), rw).reason == "memory limit"


# ---- parallelism -------------------------------------------------------------------------------

def test_items_run_concurrently_on_the_pool(monkeypatch):
    """Structural, not timed: two items must be inside the judge at the same time."""
    barrier, threads = threading.Barrier(2, timeout=10), set()

    def fake_verdict(cfg, completion, spec):
        threads.add(threading.get_ident())
        barrier.wait()   # raises BrokenBarrierError if the items ran one after the other
        return Verdict(1.0, "fake")

    monkeypatch.setattr(code, "_verdict_parsed", fake_verdict)
    assert code_tests(["a", "b", "c", "d"], tests=[FN] * 4) == [1.0] * 4
    assert len(threads) >= 2


@pytest.mark.slow
def test_a_hostile_program_does_not_hurt_its_neighbours_in_the_batch():
    """A fork bomb, a memory bomb and a flood run beside correct programs, which still pass."""
    good = explained_block("a, b = map(int, input().split())\nprint(a + b)")
    hostile = [explained_block(ATTACKS[n][1]) for n in ("fork-bomb", "thread-bomb", "memory-bomb-list", "huge-output")]
    scores = reward(hostile + [good] * 4, tests=[STDIO] * 8)
    assert scores == [0.0] * 4 + [1.0] * 4


def test_shadowed_builtins_reach_no_test_case():
    partial = make_code_tests(partial=True, timeout_s=LIMIT_S)
    v = verdict_of(ATTACKS["redefine-builtins-and-assertionerror"][1], STMT, partial)
    assert v.score == 0.0 and v.reason.startswith("passed 0/3; ")
