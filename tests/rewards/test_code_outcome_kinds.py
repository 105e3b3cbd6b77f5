"""What happened to a program travels as data from where it is seen (the sandbox run, the program session,
the judge worker's reply) to Verdict.outcome and the code/<kind>_frac metrics: real programs of every kind
under each spec kind, programs that write the words of another kind, and every failure reworded."""
import pytest

from rlvr.rewards.base import RewardFunction, score_batch
from rlvr.rewards.code import CODE_OUTCOMES, make_code_tests
from rlvr.sandbox import program as program_module
from rlvr.sandbox import outcome as outcome_module
from rlvr.train.metrics import code_metrics

from code_cases import ASSERT, FN, STDIO  # f(a, b=0) = a + b (stdio: "a b" -> a + b); one visible case

LOOP = "while True:\n    pass"
KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
FUNCTION_PROGRAMS = {
    "passed": "def f(a, b=0):\n    return a + b",
    "visible_only": "def f(a, b=0):\n    return {(1, 2): 3}.get((a, b), 0)",
    "wrong": "def f(a, b=0):\n    return a - b",
    "syntax_error": "def f(a, b) return",
    "timeout": "def f(a, b=0):\n" + "    while True:\n        pass",
    "sandbox_error": KILL,
}
STDIO_PROGRAMS = {
    "passed": "a, b = map(int, input().split())\nprint(a + b)",
    "visible_only": "print(3 if input().split() == ['1', '2'] else 0)",
    "wrong": "print(0)",
    "syntax_error": "print(1 +)",
    "timeout": LOOP,
    "sandbox_error": KILL,
}
SPECS = {"function": (FN, FUNCTION_PROGRAMS), "stdio": (STDIO, STDIO_PROGRAMS), "assert": (ASSERT, FUNCTION_PROGRAMS)}


def completion(src):
    return "I will not write code." if src is None else f"```python\n{src}\n```"


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SPECS))
def test_each_outcome_of_a_real_program_is_the_verdicts_field_and_its_metric(kind):
    spec, programs = SPECS[kind]
    reward = make_code_tests(timeout_s=1.0)
    for want, src in programs.items():
        assert reward.verdict(completion(src), spec).outcome == want, (kind, want)
    rewards = [RewardFunction(name="code_tests", weight=1.0, fn=reward)]
    texts = [completion(src) for src in programs.values()] + [completion(None), completion(programs["passed"])]
    scores = score_batch(rewards, texts, {"tests": [spec] * len(texts)})
    assert scores.outcomes["code_tests"] == [*programs, "no_code", "passed"]
    m = code_metrics(scores, rewards)
    # 8 completions: two passed, one each of the other six kinds
    assert m == {f"code/{k}_frac": (2 / 8 if k == "passed" else 1 / 8) for k in CODE_OUTCOMES}


@pytest.mark.parametrize("spec, src, want", [
    # stderr is the program's to write: its words decide no kind
    (STDIO, "import sys\nsys.stderr.write('SyntaxError: invalid syntax\\n')\nsys.exit(1)", "wrong"),
    (STDIO, "import sys\nsys.stderr.write('timed out after 1.0s\\n')\nsys.exit(1)", "wrong"),
    # a SyntaxError the program raises itself once it runs is its own exception, not a compile failure
    (FN, "raise SyntaxError('forged')", "wrong"),
    (STDIO, "raise SyntaxError('forged')", "wrong"),
])
def test_a_program_cannot_name_its_own_outcome(spec, src, want):
    assert make_code_tests(timeout_s=1.0).verdict(completion(src), spec).outcome == want


def test_rewording_every_failure_moves_no_outcome(monkeypatch):
    """Every Failure the sandbox and the program session make, and every case reason, reworded: each program
    keeps the outcome it is named by in FUNCTION_PROGRAMS and STDIO_PROGRAMS, which the first test of this
    file checks for the same programs under the same specs unreworded."""
    from rlvr.rewards.code import outcomes

    reward = make_code_tests(timeout_s=1.0)
    cases = [(spec, src) for spec, programs in (SPECS["function"], SPECS["stdio"]) for src in programs.values()]
    real = outcome_module.Failure
    reworded = lambda kind, why: real(kind, "something happened")   # noqa: E731
    for module in (outcome_module, program_module):
        monkeypatch.setattr(module, "Failure", reworded)
    monkeypatch.setattr(outcomes, "_wrong_answer", lambda *a, **k: "something happened")
    monkeypatch.setattr(outcomes, "_case_reason", lambda case, why, kind: "something happened")
    after = [reward.verdict(completion(src), spec) for spec, src in cases]
    assert [v.outcome for v in after] == [*FUNCTION_PROGRAMS, *STDIO_PROGRAMS]
    assert {v.reason.split("; ")[-1] for v in after if v.outcome != "passed"} == {"something happened"}
