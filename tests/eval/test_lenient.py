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


GSM8K_GOLD = "He has 25+49 = <<25+49=74>>74 apples.\n#### 74"
MATH_GOLD = "We have $3\\cdot 4 = \\boxed{12}$."


@pytest.mark.parametrize("completion, gold, score", [
    ("so he has 74 apples", GSM8K_GOLD, 1.0),      # the gold's '####' value is a number: the last number said
    ("25+49=74", GSM8K_GOLD, 1.0),
    ("so he has 75 apples", GSM8K_GOLD, 0.0),
    ("74 apples, or 75", GSM8K_GOLD, 0.0),          # ends on 75
    ("so it is 12", MATH_GOLD, 1.0),                # the boxed answer of a worked solution
    ("3 times 4 is 13", MATH_GOLD, 0.0),
])
def test_a_worked_solution_gold_is_graded_as_its_final_answer(completion, gold, score):
    """GSM8K's and MATH's golds are worked solutions: format-free grading reads them as the number they end
    on, as it reads the bare gold ('so he has 74 apples' is right against '74' and against the worked one)."""
    assert lenient_verdict(completion, gold).score == score
    assert lenient_verdict(completion, "74" if gold is GSM8K_GOLD else "12").score == score


def test_last_number_forms():
    assert last_number("a 12 b 3.5 c") == "3.5"
    assert last_number("\\dfrac{-1}{2} then") == "-1/2"
    assert last_number("v2 and x3") is None  # digits inside words are not numbers
    assert last_number("nothing") is None


def test_non_numeric_gold_reads_the_final_answer_or_last_line():
    assert lenient_answer("so it is\nthe answer is Paris.", "Paris") == "Paris"
    assert lenient_verdict("I think <answer>blue</answer>", "blue").score == 1.0
    assert lenient_verdict("first red\nthen blue", "red").score == 0.0
