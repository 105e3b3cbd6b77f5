"""Running one program against its parsed tests spec in the sandbox: every call over its pipes, every
check decided in this process on plain data (stdio: one run per case; function and assert kinds: one
kept-running program). The reward (reward.py) and the judge worker (judge.py) both call here, so this
module imports neither.

Each case's outcome is (passed, why, kind): `why` the words the samples show, `kind` "" for a pass, else
one of rlvr.sandbox.run's FAILURE_KINDS, decided where the failure is seen (the sandbox run, the program
session, this module's comparisons) and carried as data, never read back from `why`."""
from __future__ import annotations

from dataclasses import dataclass

from rlvr.rewards.code.checks import Runner, Undecidable, UndecidableSpec, run_test
from rlvr.rewards.code.spec import Case, Spec
from rlvr.sandbox import harness
from rlvr.sandbox.limits import Sandbox, SandboxLimits
from rlvr.sandbox.program import Program
from rlvr.sandbox.outcome import LIMIT, PROGRAM
from rlvr.sandbox.run import run_harness

CaseOutcome = tuple[bool, str, str]   # (passed, why, kind)
PASS: CaseOutcome = (True, "", "")


@dataclass(kw_only=True, frozen=True)
class CodeTestsConfig:
    partial: bool = False
    limits: SandboxLimits = SandboxLimits()
    sandbox: Sandbox = Sandbox()
    workers: int | None = None   # None: max(2, CPU count)
    test_code_s: float = 2.0     # what test code may add to a program's wall clock: an assert spec's
                                 # whole check is killed after limits.wall_s + test_code_s


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


# ---- running ---------------------------------------------------------------------------------

def stdio_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[CaseOutcome]:
    """One run per case, so each gets real stdin and stdout. Stops at the first failure, or in
    partial mode at the first time-out (so one hung program costs one time limit)."""
    outcomes = []
    for case in spec.cases:
        r = run_harness({"kind": "stdio", "source": program}, case.stdin.encode("utf-8"),
                        cfg.limits, cfg.sandbox)
        failure = r.failure(cfg.limits)
        if failure is None:
            got, want = normalise_output(r.stdout.decode("utf-8", "replace")), normalise_output(case.stdout)
            outcomes.append(PASS if got == want else (False, _wrong_answer(case, want, got, text=True), PROGRAM))
        else:
            outcomes.append((False, failure.why, failure.kind))
        if not outcomes[-1][0] and (not cfg.partial or r.timed_out):
            break
    return outcomes


def program_outcomes(program: str, spec: Spec, cfg: CodeTestsConfig) -> list[CaseOutcome]:
    """One sandbox for the program; every call over its pipes, every check decided on this side
    (for test code: in a judge worker, rlvr.rewards.code.judge)."""
    with Program(program, cfg.limits, cfg.sandbox) as running:
        if running.load_failure is not None:
            return [(False, running.load_failure.why, running.load_failure.kind)] * len(spec.cases)
        if spec.kind == "function":
            return _function_outcomes(running, spec)
        runner = Runner(running, [c for case in spec.cases for c in case.test.prefetch])
        outcomes = []
        for case in spec.cases:
            try:
                ok, why, kind = run_test(case.test, runner, spec.entry_point)
            except Undecidable as e:
                fix = e.args[1] if len(e.args) > 1 else "rewrite it as calls on plain data"
                raise UndecidableSpec(f"tests spec (assert) case {case.number} cannot be decided outside the "
                                      f"sandbox: it {e.args[0]}; {fix}") from None
            outcomes.append(PASS if ok else (False, _case_reason(case, why, kind), kind))
            if not ok and not cfg.partial:
                break
        return outcomes


def _function_outcomes(program: Program, spec: Spec) -> list[CaseOutcome]:
    name = spec.entry_point
    replies = program.call([[name, harness.encode(c.args), harness.encode(c.kwargs)] for c in spec.cases])
    outcomes = []
    for case, reply in zip(spec.cases, replies):
        tag = reply[0]
        if tag == "v":
            ok = same(case.expected, reply[1])
            outcomes.append(PASS if ok else (False, _wrong_answer(case, case.expected, reply[1]), PROGRAM))
        elif tag == "e" and reply[2] == "MemoryError":
            outcomes.append((False, "memory limit", LIMIT))
        elif tag == "e":
            why = "raised " + (f"{reply[1]}: {reply[3]}" if reply[3] else reply[1])
            outcomes.append((False, _case_reason(case, why, PROGRAM), PROGRAM))
        elif tag == "n":
            why = f"returned a {reply[1]}, not plain data"
            outcomes.append((False, _case_reason(case, why, PROGRAM), PROGRAM))
        elif tag == "m":
            outcomes.append((False, f"no function named {name}", PROGRAM))
        else:   # "x": the sandbox ended; Program decided why
            outcomes.append((False, _case_reason(case, reply[1], reply[2]), reply[2]))
    return outcomes


_WHOLE_RUN = ("timed out", "memory limit", "output too large", "crashed", "no function named",
              "malformed answer")


def _case_reason(case: Case, why: str, kind: str) -> str:
    """A failed case's reason (words only: `kind` travels beside it). A failure of the whole run is said as
    it is; hidden cases' reasons carry no exception message: it could quote the hidden inputs."""
    if why.startswith(_WHOLE_RUN):
        return why
    if case.hidden and why.startswith(("raised ", "test raised ")):
        why = why.split(":", 1)[0]
    return f"failed case {case.number}{' (hidden)' if case.hidden else ''}: {why}"


def _repr(value) -> str:
    """repr of a decoded value; one holding an int past Python's 4300 decimal digits (they arrive as
    hexadecimal, rlvr.sandbox.harness) cannot be written in decimal and is said by its size instead."""
    try:
        return repr(value)
    except ValueError:
        return f"an int of {int.bit_length(value)} bits" if type(value) is int else f"a {type(value).__name__} " \
            "holding an int too long to show"


def _wrong_answer(case: Case, want, got, text: bool = False) -> str:
    if case.hidden:  # reasons are logged with samples; keep hidden answers out of them
        return f"failed case {case.number} (hidden): wrong answer"
    show = (lambda v: repr(_clip(v))) if text else (lambda v: _clip(_repr(v)))
    return f"failed case {case.number}: expected {show(want)}, got {show(got)}"
