"""Answer forms the maths checker compares by value: each form right and wrong, and the
hedges that must still score 0 whatever form they take."""
import pytest

from rlvr.rewards import format_reward, math_accuracy
from rlvr.rewards.maths.answer import final_answers, line_answer
from rlvr.rewards.maths.accuracy import check_answer
from rlvr.rewards.maths.forms import answer_key, as_interval, parse_form

# (form, completion, gold, score): for each form a right answer (1) and a near wrong one (0)
FORMS = [
    ("ordered-list", "\\boxed{-2,1}", "-2,1", 1), ("list-any-order", "\\boxed{1, -2}", "-2, 1", 1),
    ("list-wrong-element", "\\boxed{-2, 3}", "-2, 1", 0), ("list-extra-element", "\\boxed{-2, 1, 1}", "-2, 1", 0),
    ("triple", "\\boxed{(6, 31, -1)}", "(6,31,-1)", 1), ("triple-reordered", "\\boxed{(31,6,-1)}", "(6,31,-1)", 0),
    ("pair-of-fractions", "\\boxed{\\left(\\frac{1}{2}, 3\\right)}", "(0.5,3)", 1),
    ("set-for-list", "\\boxed{\\{1, 2\\}}", "1, 2", 1), ("tuple-for-list", "\\boxed{(1, 2)}", "1, 2", 0),
    ("set-of-pairs", "\\boxed{\\{(3,4), (1,2)\\}}", "(1,2),(3,4)", 1),
    ("set-of-pairs-swapped", "\\boxed{\\{(4,3), (1,2)\\}}", "(1,2),(3,4)", 0),
    ("union", "\\boxed{(12,102) \\cup (2,12)}", "(2,12) \\cup (12,102)", 1),
    ("union-bracket", "\\boxed{(2,12] \\cup (12,102)}", "(2,12) \\cup (12,102)", 0),
    ("union-point", "\\boxed{\\{-1\\} \\cup [0,7)}", "\\{-1\\} \\cup [0,7)", 1),
    ("union-part-missing", "\\boxed{[0,7)}", "\\{-1\\} \\cup [0,7)", 0),
    ("interval-infinity", "\\boxed{(-\\infty, 3)}", "(-\\infty,3)", 1), ("interval-closed", "\\boxed{(-\\infty, 3]}", "(-\\infty,3)", 0),
    ("labelled-interval", "\\boxed{x \\in [2, 5)}", "[2,5)", 1),
    ("labelled-pair", "\\boxed{(p,q)=(3,2)}", "(3,2)", 1), ("labelled-pair-swapped", "\\boxed{(p,q)=(2,3)}", "(3,2)", 0),
    ("labelled-function", "\\boxed{f(x)=1}", "1", 1), ("labelled-function-wrong", "\\boxed{f(x)=2}", "1", 0),
    ("bare-for-labelled-gold", "\\boxed{5}", "x=5", 1), ("labelled-gold-wrong", "\\boxed{x=4}", "x=5", 0),
    ("same-equation", "\\boxed{f(y) = y}", "f(y) = y", 1), ("other-equation", "\\boxed{f(y)=2y}", "f(y) = y", 0),
    ("equivalent-plane", "\\boxed{2x-4y+2z-2=0}", "x - 2y + z - 1 = 0", 1),
    ("parallel-plane", "\\boxed{x-2y+z+1=0}", "x - 2y + z - 1 = 0", 0),
    ("same-line-rearranged", "\\boxed{y = 3 + 2x}", "y=2x+3", 1), ("other-line", "\\boxed{y=2x-3}", "y=2x+3", 0),
    ("ellipse-scaled", "\\boxed{\\frac{x^2}{4}+\\frac{y^2}{9}=1}", "9x^2+4y^2=36", 1),
    ("inequality", "\\boxed{5 < x}", "x>5", 1), ("inequality-not-strict", "\\boxed{x \\ge 5}", "x > 5", 0),
    ("inequality-as-interval", "\\boxed{-2 < x \\le 3}", "(-2,3]", 1), ("inequality-interval-end", "\\boxed{-2 \\le x < 3}", "(-2,3]", 0),
    ("interval-as-inequality", "\\boxed{[2, \\infty)}", "x \\ge 2", 1), ("interval-as-inequality-open", "\\boxed{(2, \\infty)}", "x \\ge 2", 0),
    ("percent-word", "\\boxed{50 \\text{ percent}}", "50\\%", 1), ("pct", "Answer: 12 pct", "12\\%", 1),
    ("percent-wrong", "\\boxed{40\\%}", "50\\%", 0), ("fraction-for-percent", "\\boxed{0.5}", "50\\%", 1),
    ("unit-stripped", "\\boxed{12 \\text{ cm}}", "12", 1), ("unit-squared", "\\boxed{12\\text{cm}^2}", "12", 1),
    ("unit-word", "Answer: 18 dollars", "18", 1), ("unit-wrong-value", "\\boxed{13 \\text{ cm}}", "12", 0),
    ("unit-other-than-gold", "\\boxed{12 \\text{ m}}", "12 \\text{ cm}", 0), ("unit-as-gold", "\\boxed{12\\text{ cm}}", "12 \\text{cm}", 1),
    ("degrees", "\\boxed{90^\\circ}", "90", 1), ("degrees-in-gold", "\\boxed{90}", "90^{\\circ}", 1),
    ("degrees-wrong", "\\boxed{45^\\circ}", "90^\\circ", 0),
    ("currency", "\\boxed{\\$18.90}", "18.9", 1), ("currency-gold", "\\boxed{18.90}", "\\$18.90", 1),
    ("currency-wrong", "\\boxed{\\$18.99}", "18.90", 0),
    ("log", "\\boxed{\\log_2 8}", "3", 1), ("log-wrong", "\\boxed{\\log_2 16}", "3", 0),
    ("binomial", "\\boxed{\\dbinom{5}{2}}", "10", 1), ("binomial-wrong", "\\boxed{\\binom{6}{2}}", "10", 0),
    ("factorial", "\\boxed{5!}", "120", 1), ("factorial-wrong", "\\boxed{4!}", "120", 0),
    ("matrix", "\\boxed{\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 1),
    ("matrix-entries", "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 4 & 3 \\end{pmatrix}}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 0),
    ("vector", "\\boxed{\\begin{pmatrix} 1/2 \\\\ -3 \\end{pmatrix}}", "\\begin{pmatrix} \\frac{1}{2} \\\\ -3 \\end{pmatrix}", 1),
    ("vector-transposed", "\\boxed{\\begin{pmatrix} 1 & 2 \\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 0),
    ("determinant-is-not-matrix", "\\boxed{\\begin{vmatrix} 1 & 2 \\\\ 3 & 4 \\end{vmatrix}}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 0),
    ("text-case", "\\boxed{\\text{No}}", "\\text{no}", 1), ("text-other", "\\boxed{yes}", "no", 0),
    ("choice-letter", "\\boxed{C}", "\\text{(C)}", 1), ("choice-other", "\\boxed{(B)}", "\\text{(C)}", 0),
    ("variable-case-matters", "\\boxed{X}", "x", 0),
    ("thousands-latex", "\\boxed{10{,}000}", "10000", 1), ("thousands-spaced", "\\boxed{32, 349}", "32349", 0),
    ("thousands-short-group", "\\boxed{32,34}", "3234", 0),
    ("fraction-within-rounded-gold", "\\boxed{\\frac{1}{3}}", "0.333", 1), ("coarse-decimal", "\\boxed{0.33}", "0.333", 0),
    # forms found in Math-Verify's suite (bench/math_verify_suite.py)
    ("thousands-glued", "\\boxed{32,\\! 349}", "32349", 1), ("thousands-glued-short-group", "\\boxed{32,\\! 34}", "3234", 0),
    ("cfrac", "\\boxed{\\cfrac{1}{3}}", "1/3", 1), ("cfrac-wrong", "\\boxed{\\cfrac{1}{4}}", "1/3", 0),
    ("percentage-word", "\\boxed{28 percentage}", "28\\%", 1), ("percentage-for-plain-gold", "\\boxed{28 percentage}", "0.28", 0),
    ("unit-bold", "\\boxed{\\frac{1}{3} \\textbf{meters}}", "1/3", 1),
    ("unit-bold-wrong", "\\boxed{\\frac{1}{2} \\textbf{meters}}", "1/3", 0),
    ("gold-worked-solution", "\\boxed{(12,102) \\cup (2,12)}", "The domain is \\[\\boxed{(2, 12) \\cup (12, 102)}\\].", 1),
    ("gold-worked-solution-part", "\\boxed{(2,12)}", "The domain is \\[\\boxed{(2, 12) \\cup (12, 102)}\\].", 0),
    ("gold-two-boxes", "\\boxed{-2, 1}", "\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", 1),
    ("gold-two-boxes-one-given", "\\boxed{1}", "\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", 0),
    ("gold-boxes-in-prose", "\\boxed{1, 2}", "\\boxed{1} papers, not \\boxed{2}", 0),
    ("gold-ratio-label", "\\boxed{11:21}", "V_{1}:V_{2}=11:21", 1),
    ("gold-ratio-label-wrong", "\\boxed{21:11}", "V_{1}:V_{2}=11:21", 0),
    ("gold-length-label", "\\boxed{1}", "|AB|=1", 1), ("gold-expression-not-label", "\\boxed{1}", "2x + z = 1", 0),
    ("sec", "\\boxed{\\sec^2(y)}", "\\tan^2(y)+1", 1), ("sec-wrong", "\\boxed{\\sec^2(y)}", "\\tan^2(y)", 0),
    ("decimal-under-root", "\\boxed{\\frac{10\\sqrt{10.5}}{27}}", "\\frac{5\\sqrt{42}}{27}", 1),
    ("decimal-under-root-wrong", "\\boxed{\\frac{10\\sqrt{10.4}}{27}}", "\\frac{5\\sqrt{42}}{27}", 0),
    ("labelled-values", "\\boxed{4, 5}", "AB=4, CD=5", 1), ("labelled-values-swapped", "\\boxed{5, 4}", "AB=4, CD=5", 0),
    ("labelled-list-reordered", "\\boxed{a_{37} = 19, a_3 = 2}", "a_3 = 2, a_{37} = 19", 1),
    ("labelled-list-values-swapped", "\\boxed{a_{37} = 2, a_3 = 19}", "a_3 = 2, a_{37} = 19", 0),
    ("and-list-gold", "\\boxed{6,8}", "6 \\text{ and } 8", 1), ("and-list-gold-wrong", "\\boxed{6, 9}", "6 \\text{ and } 8", 0),
    ("and-list-answer", "\\boxed{19, 46, \\text{ and } 82}", "19, 46, 82", 1),
    ("negated-inequality", "\\boxed{-x > -1}", "x < 1", 1), ("negated-inequality-wrong", "\\boxed{-x > -1}", "x > 1", 0),
    ("scaled-inequality", "\\boxed{2x \\le 2}", "x \\le 1", 1), ("squared-inequality", "\\boxed{x^2 < 1}", "x < 1", 0),
    ("gold-semicolons", "\\boxed{\\{-12, -11, -10\\}}", "-12;-11;-10", 1),
    ("gold-semicolons-wrong", "\\boxed{\\{-12, -11, 10\\}}", "-12;-11;-10", 0),
    ("gold-semicolon-triples", "\\boxed{(4, -2, 6), (0, 0, 0)}", "(0;0;0),(4;-2;6)", 1),
    ("gold-semicolon-triples-swapped", "\\boxed{(4, 6, -2), (0, 0, 0)}", "(0;0;0),(4;-2;6)", 0),
    ("plus-minus-gold-as-set", "\\boxed{\\{-2021, 2021\\}}", "\\pm 2021", 1),
    ("plus-minus-gold-one-sign-twice", "\\boxed{\\{2021, 2021\\}}", "\\pm 2021", 0),
    ("function-bounded", "\\boxed{(0,1)}", "0<f(x)<1", 1), ("function-bounded-closed", "\\boxed{[0,1)}", "0<f(x)<1", 0),
    # third pass against Math-Verify's suite
    ("not-equal", "\\boxed{x \\neq 3}", "x != 3", 1), ("not-equal-other", "\\boxed{x \\ne 4}", "x \\neq 3", 0),
    ("not-equal-for-equation", "\\boxed{x \\neq 3}", "x = 3", 0),
    ("gold-or-list", "\\boxed{(7,11),\\ (11,7)}", "(11,7)or(7,11)", 1),
    ("gold-or-list-one-given", "\\boxed{(7,11)}", "(11,7) or (7,11)", 0),
    ("gold-or-values", "\\boxed{21,16,11}", "$21,16$ or $11$", 1), ("gold-or-values-wrong", "\\boxed{21,16,12}", "$21,16$ or $11$", 0),
    ("gold-or-in-text", "\\boxed{yes}", "\\text{yes or no}", 0),
    ("box-framing-sentence", "\\boxed{Therefore $x \\geq 5$ is the solution.}", "x >= 5", 1),
    ("box-framing-sentence-wrong", "\\boxed{Therefore $x \\geq 4$ is the solution.}", "x >= 5", 0),
    ("box-we-find", "\\boxed{We find that $x \\lt 3$.}", "x < 3", 1),
]

MINERVA = "Final Answer: The final answer is ${}$. I hope it is correct."
LINES = [
    ("minerva", MINERVA.format("100"), "100", 1), ("minerva-wrong", MINERVA.format("101"), "100", 0),
    ("minerva-and-box", "So $\\boxed{100}$.\n" + MINERVA.format("100"), "100", 1),
    ("minerva-and-other-box", "So $\\boxed{99}$.\n" + MINERVA.format("100"), "100", 0),
    ("final-answer-box", "Final Answer: \\boxed{100}", "100", 1), ("bold-final-answer-box", "**Final Answer:** \\boxed{100}", "100", 1),
    ("bold-heading-then-box", "**Final Answer**\n\n$\\boxed{100}$", "100", 1),
    ("bold-label", "**Answer:** 100", "100", 1), ("bold-value", "Answer: **100**", "100", 1),
    ("bold-label-wrong", "**Answer:** 101", "100", 0), ("bold-value-wrong", "Answer: **101**", "100", 0),
    ("same-value-two-spellings", "\\boxed{0.5}\nAnswer: 1/2", "1/2", 1),
    ("label-and-value", "\\boxed{x = 5}\nAnswer: 5", "5", 1),
    ("minerva-paren-delimiters", MINERVA.replace("${}$", "\\({}\\)").format("(-6, 10)"), "(-6, 10)", 1),
    ("minerva-paren-delimiters-wrong", MINERVA.replace("${}$", "\\({}\\)").format("(-6, 10]"), "(-6, 10)", 0),
    ("answer-then-math", "Answer $ 9 $", "9", 1), ("answer-then-display-math", "Answer \\[ \n 9 \n \\]", "9", 1),
    ("answer-then-paren-math", "Answer \\( (9+1) \\)", "10", 1), ("answer-then-math-wrong", "Answer $$ 8 $$", "9", 0),
    ("answer-then-inline-math-over-lines", "Answer $ \n 9 \n $", "9", 0),
    ("minerva-sentence", "Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", "120", 1),
    ("minerva-sentence-wrong", "Final Answer: The largest $n$ is 35.", "34", 0),
    ("minerva-then-next-turn", "Final Answer: The final answer is 12,000,023. I hope it is correct. <|im_start|>user",
     "12000023", 1),
    ("sentence-then-next-turn", "Final Answer: The number of points is 19. <|im_start|>user\nAnswer: 20", "19", 0),
]

# hedges and near misses in the new forms: all 0
HEDGES = [
    ("boxes-or", "\\boxed{3} or \\boxed{5}", "3"), ("line-of-boxes-or", "Answer: \\boxed{3} or \\boxed{5}", "3"),
    ("final-answer-two-boxes", "Final Answer: \\boxed{100} \\boxed{101}", "100"),
    ("minerva-or", MINERVA.format("3$ or $5"), "3"), ("equation-not-label", "\\boxed{5=3}", "3"),
    ("true-equation", "\\boxed{3=3}", "3"), ("chain", "\\boxed{x = 5 = 3}", "3"), ("two-labels", "\\boxed{x=3, y=5}", "3"),
    ("labelled-list", "\\boxed{x = 3, 5}", "3"), ("labelled-set", "\\boxed{x \\in \\{3, 5\\}}", "3"),
    ("list-for-value", "\\boxed{3, 5}", "3"), ("list-same-value-twice", "\\boxed{3, 3}", "3"),
    ("union-for-value", "\\boxed{\\{3\\} \\cup \\{5\\}}", "3"), ("tuple-for-value", "\\boxed{(3, 5)}", "3"),
    ("inequality-for-value", "\\boxed{x > 2}", "3"), ("inequality-for-equation", "\\boxed{y > 2x + 3}", "y = 2x + 3"),
    ("trivial-equation", "\\boxed{0=0}", "x - 2y + z - 1 = 0"), ("identity-equation", "\\boxed{x = x}", "x = 5"),
    ("or-in-unit", "\\boxed{12 \\text{ or 13}}", "12"), ("and-in-unit", "\\boxed{12 \\text{ cm and 13 cm}}", "12"),
    ("or-in-text", "\\boxed{3 \\text{ or } 5}", "3"), ("spaced-digits", "\\boxed{3 2 3 4 9}", "32349"),
    ("percent-for-plain-gold", "\\boxed{50\\%}", "50"), ("percent-word-for-plain-gold", "\\boxed{50 \\text{ percent}}", "0.5"),
    ("plus-minus-list", "\\boxed{\\pm 3, 5}", "3"), ("matrix-cell-hedge", "\\boxed{\\begin{pmatrix} 3 \\text{ or } 4 \\end{pmatrix}}",
                                                       "\\begin{pmatrix} 3 \\end{pmatrix}"),
    ("variable-times-value", "\\boxed{12 x}", "12"), ("case-of-a-variable", "\\boxed{X}", "x"),
    ("think-reopened", "<think>a</think><think>Answer: 42", "42"),
    ("and-list-for-value", "\\boxed{3 \\text{ and } 5}", "3"), ("or-for-and-gold", "\\boxed{6 \\text{ or } 8}", "6 \\text{ and } 8"),
    ("one-sign-for-plus-minus", "\\boxed{2021}", "\\pm 2021"),
    ("labelled-list-for-equation", "\\boxed{x = 3, x = 5}", "x = 3"), ("labelled-list-for-value", "\\boxed{x = 3, y = 3}", "3"),
    # the sentence and framing readings of the third pass never take a hedged or negated value
    ("sentence-negated", "Final Answer: It is not true that the answer is 5.", "5"),
    ("sentence-or", "Final Answer: The value is 5 or 6.", "5"), ("sentence-hedged", "Final Answer: x is maybe 5", "5"),
    ("sentence-two-values", "Final Answer: The value is 5 and 6.", "5"),
    ("box-negated-math", "\\boxed{It is not $5$}", "5"), ("box-either-math", "\\boxed{either $5$ or so}", "5"),
    ("box-two-math-segments", "\\boxed{Therefore $5$ or $6$ is the solution.}", "5"),
    ("answer-line-math-or", "Answer $5$ or $6$", "5"), ("answer-mid-prose", "We know the answer $5$ must be checked. Answer: 6", "5"),
    ("gold-or-answer-or", "\\boxed{(7,11) \\text{ or } (11,7)}", "(11,7)or(7,11)"),
]


@pytest.mark.parametrize("text, gold, score", [c[1:] for c in FORMS + LINES], ids=[c[0] for c in FORMS + LINES])
def test_form(text, gold, score):
    assert math_accuracy([text], answer=[gold]) == [float(score)]


@pytest.mark.parametrize("text, gold", [c[1:] for c in HEDGES], ids=[c[0] for c in HEDGES])
def test_hedges_score_zero(text, gold):
    assert math_accuracy([text], answer=[gold]) == [0.0]


def test_answer_lines_lose_their_dressing():
    assert line_answer(" The final answer is $\\frac{2}{3}$. I hope it is correct.") == "\\frac{2}{3}"
    assert line_answer("** $\\boxed{7}$") == "7"
    assert line_answer(" \\boxed{3} or \\boxed{5}") == "\\boxed{3} or \\boxed{5}"
    assert line_answer(" \\boxed{3}\\boxed{5}") == ""  # the boxes speak for themselves
    assert final_answers("**Final Answer:**\n\\boxed{100}") == ["100", "100"]   # the line after, and the box
    assert final_answers("Answer: **100**\n\\boxed{100}") == ["100", "100"]


def test_one_answer_stated_twice_is_one_for_the_format_reward_too():
    assert format_reward(["\\boxed{12}\nFinal Answer: 12"]) == [1.0]
    assert format_reward(["\\boxed{12}\n**Answer:** 13"]) == [0.0]


def test_answer_keys():
    assert [answer_key(a) for a in ("x = 5", "5.0", "\\frac{10}{2}", "1,000", "50\\%", "2x + 1", "9 1 6")] == \
        ["5", "5", "5", "1000", "50%", "2x+1", "9 1 6"]
    assert answer_key("32, 349") != answer_key("32349")


def test_forms_and_intervals():
    assert parse_form("(6,31,-1)").kind == "tuple" and parse_form("1,000").kind == "value"
    assert parse_form("x = 5 = 3").kind == "chain" and parse_form("5=3").kind == "equation"
    assert parse_form("\\{-1\\} \\cup [0,7)").kind == "union"
    assert as_interval(parse_form("x > 5")).parts == ("5", "\\infty")
    assert as_interval(parse_form("3 \\ge x > -2")).brackets == "(]"
    assert as_interval(parse_form("x < y < z")).parts == ("x", "z")
    assert as_interval(parse_form("x < 2 > y")) is None


def test_reasons_name_the_form():
    assert check_answer("(1, 2)", "1, 2") == (False, "a tuple for a gold list")
    assert check_answer("12 \\text{ m}", "12 \\text{ cm}") == (False, "unit m for a gold in cm")
    assert check_answer("x > 5", "5") == (False, "an inequality, not a value")
    assert check_answer("\\{3\\} \\cup \\{5\\}", "3") == (False, "a set or interval for a single gold value")
