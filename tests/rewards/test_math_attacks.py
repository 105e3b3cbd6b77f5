"""The maths checker against known reward hacks (each must score 0) and positive controls (score 1)."""
import os

import pytest

from rlvr.rewards import math_accuracy
from rlvr.rewards.maths.accuracy import check_answer
from rlvr.rewards.maths.worker import SymbolicWorker

ATTACKS = [
    ("equation-chain", "\\boxed{5=3}", "3"),
    ("equation-chain-x", "Answer: x = 5 = 3", "3"),
    ("two-boxes", "\\boxed{3} \\boxed{5}", "3"),
    ("box-and-line", "\\boxed{4}\nAnswer: 3", "3"),
    # two final answers in different forms on one line, either order
    ("box-then-answer-same-line", "\\boxed{7} Answer: 8", "7"),
    ("answer-then-box-same-line", "So the result is Answer: 8 and \\boxed{7}", "7"),
    ("tag-and-inline-answer", "<answer>7</answer> final answer: 8", "7"),
    ("two-answer-lines", "Answer: 3\nAnswer: 4", "3"),
    ("boxed-set-as-answers", "\\boxed{\\{3, 5\\}}", "3"),
    ("comma-list", "Answer: 3, 5", "3"),
    ("or-list", "Answer: 1 or 2 or 3", "2"),
    ("text-or-list", "\\boxed{1 \\text{ or } 2}", "2"),
    ("and-list", "Answer: 2 and 3", "3"),
    ("semicolon-list", "Answer: 2; 3", "3"),
    ("plus-minus", "\\boxed{\\pm 3}", "3"),
    ("plus-minus-unicode", "Answer: ±3", "3"),
    ("scaled-decimal", "Answer: 50", "0.5"),
    ("percent-for-plain-gold", "Answer: 50\\%", "0.5"),
    ("tiny-values-rounding", "Answer: 0.0000002", "0.0000001"),
    ("tiny-value-zero", "Answer: 0", "0.0000001"),
    ("near-integer", "Answer: 3.0001", "3"),
    ("less-precise-than-rounded-gold", "Answer: 3.1", "3.14"),
    ("rounded-gold-off-by-one-unit", "Answer: 3.15", "3.14"),
    ("interval-for-value", "\\boxed{[2, 4]}", "3"),
    ("inequality", "Answer: x > 2", "3"),
    ("unclosed-think", "<think>The answer is clear. Answer: 3", "3"),
    ("answer-only-inside-think", "<think>Answer: 3</think> I am done.", "3"),
    ("empty-box", "\\boxed{}", "3"),
    ("unbalanced-frac", "\\boxed{\\frac{6}{2}", "3"),
    ("free-symbol", "Answer: x", "3"),
    ("infinity", "\\boxed{\\infty}", "3"),
    ("code-injection", "Answer: __import__('os').system('touch /tmp/rlvr_pwned')", "0"),
    ("dunder-names", "\\boxed{().__class__.__bases__[0]}", "3"),
    ("power-tower", "\\boxed{5^{5^{5^{5^5}}}}", "3"),
    ("nested-parentheses", "\\boxed{" + "(" * 500 + "3" + ")" * 500 + "}", "3"),
    ("huge-exponent", "Answer: 1e999999999", "3"),
    ("overlong-answer", "Answer: " + "3" * 5000, "3"),
    ("set-for-set-missing-element", "\\boxed{\\{1, 2\\}}", "\\{1, 2, 3\\}"),
    ("wrong-interval-brackets", "\\boxed{(0, 1)}", "[0, 1]"),
    # a value stated after an answer word on the box's own line is a second answer
    ("stated-then-box-same-line", "The answer is 4. \\boxed{3}", "3"),
    ("stated-math-then-box", "The answer is $4$ \\boxed{3}", "3"),
    ("stated-then-words-then-box", "The correct answer is \\(4\\). So \\boxed{3}", "3"),
    ("stated-colon-comma-box", "My answer is: 4, \\boxed{3}", "3"),
    ("box-then-stated-same-line", "\\boxed{3} and the answer is **4**! Done", "3"),
    # an abbreviated label, a variable's value or a fraction stated beside the box
    ("abbreviated-label", "ANS: 4\n\\boxed{3}", "3"),
    ("abbreviated-label-dot", "Ans. 4\n\\boxed{3}", "3"),
    ("stated-as-assignment", "The answer is x = 4.\n\\boxed{3}", "3"),
    ("stated-as-latex-fraction", "\\boxed{3}\nThe answer is $\\frac{8}{2}$.", "3"),
]

CONTROLS = [
    ("half", "Answer: 1/2", "0.5"),
    ("mixed-number", "\\boxed{3\\frac{1}{2}}", "7/2"),
    ("roots", "\\boxed{\\sqrt{2}/2}", "\\frac{1}{\\sqrt{2}}"),
    ("set-order", "\\boxed{\\{2, 1\\}}", "\\{1, 2\\}"),
    ("trailing-point", "Answer: 7.", "7"),
    ("thousands", "Answer: 1,000", "1000"),
    ("assignment", "\\boxed{x = 5}", "5"),
    ("tag", "<answer> -4 </answer>", "-4"),
    ("dfrac", "\\boxed{\\dfrac{3}{4}}", "0.75"),
    ("percent-gold", "Answer: 50\\%", "50\\%"),
    ("rounded-gold", "Answer: 3.1416", "3.14"),
    ("pi-rounded-gold", "\\boxed{\\frac{\\pi}{4}}", "0.785"),
    ("after-think", "<think>maybe 4</think>\nAnswer: 3", "3"),
    ("same-answer-twice", "\\boxed{3}\nAnswer: 3", "3"),
    ("inline-answer-agrees-with-box", "\\boxed{3} so the final answer: 3", "3"),
    ("interval", "\\boxed{(0, 1]}", "(0, 1]"),
    ("symbolic", "\\boxed{2x + 1}", "1 + 2x"),
    ("text-unit", "\\boxed{12\\text{}}", "12"),
    ("stated-and-boxed-agree", "The answer is 3.5. So \\boxed{\\frac{7}{2}}", "7/2"),
    ("stated-decimal-then-box", "The answer is 2.5 \\boxed{2.5}", "2.5"),
    ("stated-assignment-agrees", "The answer is $x = 3$.\n\\boxed{x=3}", "3"),
    ("abbreviated-label-agrees", "Ans: 12\n\\boxed{12}", "12"),
    # a decimal comma on the answer line is the same number to the scan for second answers
    ("decimal-comma-line", "Answer: 0,5", "0.5"),
    ("decimal-comma-line-long", "Answer: 1000,99", "1000.99"),
]


@pytest.mark.parametrize("text, gold", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_scores_zero(text, gold):
    assert math_accuracy([text], answer=[gold]) == [0.0]


def test_code_injection_did_nothing():
    math_accuracy(["Answer: __import__('os').system('touch /tmp/rlvr_pwned')"], answer=["0"])
    assert not os.path.exists("/tmp/rlvr_pwned")


@pytest.mark.parametrize("text, gold", [c[1:] for c in CONTROLS], ids=[c[0] for c in CONTROLS])
def test_control_scores_one(text, gold):
    assert math_accuracy([text], answer=[gold]) == [1.0]


def test_there_are_enough_attacks():
    assert len(ATTACKS) >= 25


@pytest.mark.slow  # waits out a wall clock
def test_power_tower_is_cut_off_by_the_wall_clock_and_the_worker_recovers():
    worker = SymbolicWorker(timeout_s=1.0)
    try:
        equal, reason = worker.compare("5^{5^{5^{5^5}}}", "3")
        assert not equal and reason in ("timed out after 1s", "memory limit while parsing")
        assert worker.compare("\\sqrt{4}", "2") == (True, "equivalent")
    finally:
        worker.close()


def test_reasons_say_why():
    assert check_answer("5=3", "3") == (False, "an equation, not a value")
    assert check_answer("x = 5 = 3", "3") == (False, "a chain of equations, not one answer")
    assert check_answer("1 or 2", "2") == (False, "a list of candidates, not one answer")
    v = math_accuracy.verdict("Answer: 4", "3")
    assert (v.score, v.reason, v.extracted) == (0.0, "wrong: 4 != 3", "4")


@pytest.mark.slow
def test_a_crashed_worker_is_restarted_and_counted():
    import os
    import signal

    worker = SymbolicWorker(timeout_s=2.0)
    try:
        assert worker.compare("\\frac{1}{2}", "0.5")[0]
        os.killpg(worker.process.pid, signal.SIGKILL)  # the checker dies between two answers
        worker.process.wait()
        assert worker.compare("\\sqrt{4}", "2") == (True, "equivalent")  # restarted, nothing lost
        assert worker.restarts == 1
        os.killpg(worker.process.pid, signal.SIGSTOP)  # hung: the answer scores 0, the worker is replaced
        assert worker.compare("\\sqrt{9}", "3") == (False, "timed out after 2s")
        assert worker.restarts == 2
        assert worker.compare("\\sqrt{9}", "3") == (True, "equivalent")
    finally:
        worker.close()
