"""code_outcome reads what happened to a completion from its real verdict reason; the loop's
code/<outcome>_frac metrics and the test_special_casing health rule are built on it."""
import pytest

from rlvr.rewards import build_rewards
from rlvr.rewards.base import score_batch
from rlvr.rewards.code import CODE_OUTCOMES, code_outcome, make_code_tests
from rlvr.train.metrics import code_metrics

from code_cases import FN  # tests/rewards/code_cases.py: f(a, b=0) = a + b, one visible case, two hidden

PROGRAMS = {
    "passed": "def f(a, b=0):\n    return a + b",
    "visible_only": "def f(a, b=0):\n    return {(1, 2): 3}.get((a, b), 0)",  # special-cases the example
    "wrong": "def f(a, b=0):\n    return a - b",
    "no_code": None,
    "syntax_error": "def f(a, b) return",
    "timeout": "def f(a, b=0):\n    while True:\n        pass",
    "sandbox_error": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
}


def completion(src):
    return "I will not write code." if src is None else f"```python\n{src}\n```"


@pytest.mark.slow
def test_each_outcome_from_a_real_verdict():
    reward = make_code_tests(timeout_s=2.0)
    for want, src in PROGRAMS.items():
        v = reward.verdict(completion(src), FN)
        assert v.outcome == want and code_outcome(v.reason) == want, (want, v.reason)
    assert set(PROGRAMS) == set(CODE_OUTCOMES)


@pytest.mark.parametrize("reason, want", [
    ("passed 3/3", "passed"),
    ("passed 1/3; failed case 2 (hidden): wrong answer", "visible_only"),
    ("passed 0/3; failed case 1: expected 3, got -1", "wrong"),
    ("failed case 2 (hidden): raised ValueError", "visible_only"),
    ("timed out after 2.0s", "timeout"),
    ("cpu time limit", "timeout"),
    ("memory limit (whole run)", "sandbox_error"),
    ("output too large", "sandbox_error"),
    ("no function named f", "wrong"),
])
def test_outcome_of_reason_hand_written(reason, want):
    assert code_outcome(reason) == want


def test_code_metrics_are_shares_of_completions():
    rewards = build_rewards({"code_tests": 1.0}, 64, 8, 1.0)
    texts = [completion(PROGRAMS[k]) for k in ("passed", "visible_only", "visible_only", "wrong")]
    scores = score_batch(rewards, texts, {"tests": [FN] * 4})
    assert scores.outcomes["code_tests"] == ["passed", "visible_only", "visible_only", "wrong"]
    m = code_metrics(scores, rewards)
    assert m["code/passed_frac"] == 0.25 and m["code/visible_only_frac"] == 0.5 and m["code/wrong_frac"] == 0.25
    assert sum(m.values()) == pytest.approx(1.0) and len(m) == len(CODE_OUTCOMES)
    assert code_metrics(scores, build_rewards({"format": 1.0}, 64, 8, 1.0)) == {}


@pytest.mark.parametrize("reason, outcome", [
    ("failed case 1 (hidden): assertion failed", "wrong"),           # no visible case came before it
    ("passed 0/2; failed case 1 (hidden): raised ValueError", "wrong"),
    ("failed case 2 (hidden): wrong answer", "visible_only"),
    ("failed case 12 (hidden): wrong answer", "visible_only"),
])
def test_a_failing_first_case_that_is_hidden_is_wrong_not_visible_only(reason, outcome):
    assert code_outcome(reason) == outcome


def test_metrics_count_the_verdicts_outcome_not_the_words_of_its_reason(monkeypatch):
    """Rewording a reason moves no metric: code/<outcome>_frac counts Verdict.outcome, set where the
    verdict is made."""
    from rlvr.rewards.code import outcomes

    rewards = build_rewards({"code_tests": 1.0}, 64, 8, 1.0)
    texts = [completion(PROGRAMS[k]) for k in ("passed", "visible_only", "no_code", "wrong")]
    before = code_metrics(score_batch(rewards, texts, {"tests": [FN] * 4}), rewards)
    monkeypatch.setattr(outcomes, "_wrong_answer", lambda *a, **k: "your answer differs")
    reworded = score_batch(rewards, texts, {"tests": [FN] * 4})
    assert reworded.reasons["code_tests"][1] == "your answer differs"   # read back, it would be "wrong"
    assert code_outcome(reworded.reasons["code_tests"][1]) == "wrong"
    assert code_metrics(reworded, rewards) == before
    assert (before["code/passed_frac"], before["code/visible_only_frac"], before["code/no_code_frac"],
            before["code/wrong_frac"]) == (0.25, 0.25, 0.25, 0.25)
