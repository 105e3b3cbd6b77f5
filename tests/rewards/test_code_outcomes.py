"""Verdict.outcome says what happened to a completion; the loop's code/<outcome>_frac metrics and the
test_special_casing health rule are built on it."""
import pytest

from rlvr.rewards import build_rewards
from rlvr.rewards.base import score_batch
from rlvr.rewards.code import CODE_OUTCOMES, make_code_tests, parse_spec
from rlvr.rewards.code.reward import _outcome_of
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
        assert v.outcome == want, (want, v.reason)
    assert set(PROGRAMS) == set(CODE_OUTCOMES)


FAILED = (False, "", "wrong")   # a case the program's own answer or exception failed (the words: any)


@pytest.mark.parametrize("outcomes, want", [
    ([FAILED], "wrong"),                                               # the visible case
    ([(True, "", ""), FAILED], "visible_only"),                         # visible passed, hidden failed
    ([(True, "", ""), (True, "", ""), FAILED], "visible_only"),
    ([(True, "", ""), (False, "", "timeout")], "timeout"),              # a limit on a hidden case is the limit's
    ([(True, "", ""), (False, "", "sandbox_error")], "sandbox_error"),
    ([(False, "", "syntax_error")] * 3, "syntax_error"),
])
def test_outcome_of_case_outcomes_hand_written(outcomes, want):
    assert _outcome_of(parse_spec(FN), outcomes) == want


def test_code_metrics_are_shares_of_completions():
    rewards = build_rewards({"code_tests": 1.0}, 64, 8, 1.0)
    texts = [completion(PROGRAMS[k]) for k in ("passed", "visible_only", "visible_only", "wrong")]
    scores = score_batch(rewards, texts, {"tests": [FN] * 4})
    assert scores.outcomes["code_tests"] == ["passed", "visible_only", "visible_only", "wrong"]
    m = code_metrics(scores, rewards)
    assert m["code/passed_frac"] == 0.25 and m["code/visible_only_frac"] == 0.5 and m["code/wrong_frac"] == 0.25
    assert sum(m.values()) == pytest.approx(1.0) and len(m) == len(CODE_OUTCOMES)
    assert code_metrics(scores, build_rewards({"format": 1.0}, 64, 8, 1.0)) == {}


def test_a_failing_first_case_that_is_hidden_is_wrong_not_visible_only():
    """No visible case came before it (HumanEval's check shows none), so nothing was special-cased."""
    hidden_only = parse_spec({"kind": "function", "entry_point": "f", "cases": [],
                              "hidden": [{"args": [1], "expected": 1}, {"args": [2], "expected": 2}]})
    assert _outcome_of(hidden_only, [FAILED]) == "wrong"
    assert _outcome_of(hidden_only, [(True, "", ""), FAILED]) == "wrong"


def test_metrics_count_the_verdicts_outcome_not_the_words_of_its_reason(monkeypatch):
    """Rewording a reason moves no metric: code/<outcome>_frac counts Verdict.outcome, set where the
    verdict is made."""
    from rlvr.rewards.code import outcomes

    rewards = build_rewards({"code_tests": 1.0}, 64, 8, 1.0)
    texts = [completion(PROGRAMS[k]) for k in ("passed", "visible_only", "no_code", "wrong")]
    before = code_metrics(score_batch(rewards, texts, {"tests": [FN] * 4}), rewards)
    monkeypatch.setattr(outcomes, "_wrong_answer", lambda *a, **k: "your answer differs")
    reworded = score_batch(rewards, texts, {"tests": [FN] * 4})
    assert reworded.reasons["code_tests"][1] == "your answer differs"
    assert code_metrics(reworded, rewards) == before
    assert (before["code/passed_frac"], before["code/visible_only_frac"], before["code/no_code_frac"],
            before["code/wrong_frac"]) == (0.25, 0.25, 0.25, 0.25)
