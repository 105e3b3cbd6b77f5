"""The format-free grader on hand-written completions: the answer the completion ends on, any form."""
import pytest

from rlvr.eval.lenient import last_number, lenient_answer, lenient_verdict


@pytest.mark.parametrize("completion, gold, score", [
    ("4 * 7 = 28\nAnswer: 28", "28", 1.0),          # strict pass is a lenient pass
    ("4 * 7 = 28", "28", 1.0),                      # right, no answer line
    ("4 * 7 = 32\nAnswer: 32", "28", 0.0),          # in form and wrong
    ("The answer is 28.", "28", 1.0),
    ("3 - 8 = -5", "-5", 1.0),                      # a sign after '='
    ("8-3=5", "5", 1.0),
    ("5-3", "-3", 0.0),                             # the minus of '5-3' is an operator, not a sign
    ("x = \\frac{3}{4}", "0.75", 1.0),              # LaTeX fraction, compared by value
    ("half of it: 1/2", "0.5", 1.0),
    ("That makes 1,000 apples", "1000", 1.0),
    ("28 is 4 * 7", "28", 0.0),                     # the last number said is 7
    ("<think>4 * 7 = 28", "28", 1.0),               # unclosed reasoning still shows the answer
    ("no idea", "28", 0.0),
    ("", "28", 0.0),
    ("\\boxed{7} Answer: 8", "7", 0.0),             # ends on 8
])
def test_lenient_verdict(completion, gold, score):
    assert lenient_verdict(completion, gold).score == score


def test_last_number_forms():
    assert last_number("a 12 b 3.5 c") == "3.5"
    assert last_number("\\dfrac{-1}{2} then") == "-1/2"
    assert last_number("v2 and x3") is None  # digits inside words are not numbers
    assert last_number("nothing") is None


def test_non_numeric_gold_reads_the_final_answer_or_last_line():
    assert lenient_answer("so it is\nthe answer is Paris.", "Paris") == "Paris"
    assert lenient_verdict("I think <answer>blue</answer>", "blue").score == 1.0
    assert lenient_verdict("first red\nthen blue", "red").score == 0.0
