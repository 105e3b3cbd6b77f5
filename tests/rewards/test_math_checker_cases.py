"""math_accuracy against wrong or hedged answers dressed in the forms it reads (units, sentences, cut
points, hidden markers, LaTeX that renders otherwise, rounding, labels) and the right answers in the
same forms. Every attack scores 0, every right answer 1, no input raises or costs the worker's limit."""

import pytest

from rlvr.rewards import math_accuracy
from rlvr.rewards.maths.answer import final_answers, gold_answer
from rlvr.rewards.format import format_check
from rlvr.rewards.maths.normalise import clean, exact_value, huge_power
from rlvr.rewards.maths.units import read_unit

ATTACKS = [
    # a text after the value that is no unit: it negates, hedges or scales the value
    ("text-negates", "\\boxed{24} \\text{ is not right}", "24"),
    ("text-hedges", "\\boxed{24\\text{ (unsure)}}", "24"),
    ("text-scales", "\\boxed{24 \\text{ million}}", "24"),
    ("prose-scales", "Answer: 24 thousand", "24"),
    ("prose-negates", "Answer: 24 not", "24"),
    ("text-unknown-word", "\\boxed{24 \\text{ nope}}", "24"),
    # units are compared: another unit, another power, another angle unit
    ("unit-radians-for-degrees", "\\boxed{45 \\text{ radians}}", "45^\\circ"),
    ("unit-power", "\\boxed{8 \\text{ m}^3}", "8 \\text{ m}^2"),
    ("unit-power-sign", "\\boxed{8 cm²}", "8\\text{ cm}^3"),
    ("unit-scale", "\\boxed{5 \\text{ km}}", "5 \\text{ m}"),
    ("unit-converted-wrong", "\\boxed{0.5 \\text{ km}}", "5000 \\text{ m}"),
    ("unit-time", "Answer: 3 days", "3 \\text{ hours}"),
    # two answers that differ only by their unit
    ("two-units", "\\boxed{7 \\text{ kg}} and so Answer: 7 g", "7"),
    ("unit-and-scale", "\\boxed{7}\nAnswer: 7 thousand", "7"),
    # currency and degree signs are compared
    ("euro-for-dollar", "\\boxed{€18}", "\\$18"),
    ("pound-for-dollar", "Answer: £18", "\\$18"),
    ("yen-word-for-dollar", "Answer: 18 yen", "\\$18"),
    ("two-currencies", "\\boxed{\\$18 \\text{ euros}}", "18"),
    # the sentence form: negations, hedges, quoted claims
    ("sentence-isnt", "Final Answer: The area isn't 30.", "30"),
    ("sentence-dont", "Final Answer: I don't think the count is 30.", "30"),
    ("sentence-cannot", "Final Answer: The sum cannot be 30.", "30"),
    ("sentence-wrong", "Final Answer: The claimed value is 30 which is wrong", "30"),
    ("sentence-wrong-before", "Final Answer: Saying the total is wrong is 30", "30"),
    ("sentence-none", "Final Answer: None of the options is 30.", "30"),
    ("sentence-unlikely", "Final Answer: It is unlikely the answer is 30.", "30"),
    ("sentence-whether", "Final Answer: We check whether n is 30.", "30"),
    ("sentence-quotes-claim", "Final Answer: The claim to prove is that the sum is 30.", "30"),
    ("sentence-quotes-question", "Final Answer: The question asks if the total is 30.", "30"),
    ("sentence-curly-contraction", "Final Answer: The value doesn’t equal 30.", "30"),
    ("sentence-i-think", "Final Answer: I think the count is 30.", "30"),
    ("sentence-seems", "Final Answer: It seems the count is 30.", "30"),
    ("sentence-modal", "Final Answer: The count could be 30.", "30"),
    # a cut point hides nothing
    ("after-fake-token", "Answer: 30 <|fake|> 31", "30"),
    ("after-end-token", "Answer: 31<|im_end|> 30", "30"),
    ("after-hope", "Final Answer: The final answer is $30$. I hope it is correct. 31", "30"),
    ("second-answer-same-line", "Answer: 30. Answer: 31", "30"),
    ("second-final-answer-same-line", "Final Answer: 30 Final Answer: 31", "30"),
    # a second answer in a form the reader must see
    ("fullwidth-colon", "\\boxed{30}\nAnswer：31", "30"),
    ("box-with-space", "Answer: 30\n\\boxed {31}", "30"),
    ("next-line-after-label", "\\boxed{30}\n**Final Answer:**\n31", "30"),
    ("hashes-disagree", "#### 30\n#### 31", "30"),
    ("hashes-and-answer", "Answer: 30\n#### 31", "30"),
    # the `Answer $9$` form never reads wrapped prose
    ("wrapped-prose-answer", "Plug the candidate\nanswer $30$\ninto the equation: it fails.", "30"),
    # numbers and LaTeX as they render
    ("leading-zero-group", "\\boxed{0,030}", "30"),
    ("quad-spaced-digits", "\\boxed{3\\quad 0}", "30"),
    ("backslash-space-digits", "\\boxed{3\\ 0}", "30"),
    ("thick-space-digits", "\\boxed{3\\;0}", "30"),
    ("braces-concatenate", "\\boxed{5{6}}", "30"),
    ("frac-without-braces", "\\boxed{\\frac 123}", "4"),
    ("box-in-comment", "So $x = 7$. % \\boxed{30}", "30"),
    # exact golds are compared exactly
    ("float-column-gold", "Answer: 30.04", "30.0"),
    ("trailing-zero-gold", "Answer: 1.254", "1.250"),
    ("tie-to-exact-gold", "Answer: 4.125", "4.12"),
    ("tie-symbolic", "\\boxed{4.12 + \\frac{1}{200}}", "4.12"),
    # labels and point golds
    ("hedge-label", "Answer: maybe = 30", "30"),
    ("not-label", "Answer: no = 30", "30"),
    ("inequality-for-point", "\\boxed{2 < x < 9}", "(2, 9)"),
]

RIGHT = [
    ("tag-around-box", "<answer>\\boxed{30}</answer>", "30"),
    ("label-around-box", "Answer: y = \\boxed{30}", "30"),
    ("code-prints-answer", "```python\nprint(f\"Answer: {n}\")\n```\nIt prints the count.\nAnswer: 30", "30"),
    ("set-twice-two-orders", "\\boxed{\\{3, 8\\}}\nAnswer: \\{8, 3\\}", "\\{3, 8\\}"),
    ("count-noun", "Answer: 30 marbles", "30"),
    ("cubic-units", "Final Answer: The volume is 30 cubic units.", "30"),
    ("square-feet", "\\boxed{30 \\text{ square feet}}", "30"),
    ("unit-as-gold", "\\boxed{30\\,\\text{cm}^2}", "30 \\text{ cm}^2"),
    ("unit-converted", "\\boxed{1.5 \\text{ km}}", "1500 \\text{ m}"),
    ("dollar-sign", "Answer: \\$30", "30"),
    ("dollar-word-for-sign", "Answer: 30 dollars", "\\$30"),
    ("degrees", "\\boxed{30^\\circ}", "30"),
    ("degree-word-for-sign", "Answer: 30 degrees", "30^{\\circ}"),
    ("repeating-decimal", "\\boxed{0.\\overline{6}}", "\\frac{2}{3}"),
    ("repeating-decimal-tail", "\\boxed{1.2\\overline{3}}", "\\frac{37}{30}"),
    ("sentence-with-math", "Final Answer: $n$ is $30$.", "30"),
    ("answer-math-chat-token", "Work done.\n\nAnswer $30$<|im_end|>", "30"),
    ("answer-line-chat-token", "Answer: 30<|im_end|><|im_start|>user", "30"),
    ("neq-either-order", "\\boxed{30 \\neq y}", "y \\neq 30"),
    ("or-gold-labels", "\\boxed{-4, 4}", "x = 4 or x = -4"),
    ("french-interval-gold", "\\boxed{(0, 1)}", "]0, 1["),
    ("french-half-open", "\\boxed{[0, 1)}", "[0, 1["),
    ("thousands-thin-space", "\\boxed{12\\,345}", "12345"),
    ("frac-single-digits", "\\boxed{\\frac12}", "0.5"),
    ("rounded-gold-fraction", "\\boxed{\\frac{2}{3}}", "0.667"),
    ("inequality-for-interval", "\\boxed{2 < x \\le 9}", "(2, 9]"),
    ("plain-sentence", "Final Answer: The number of pears is 30.", "30"),
    ("label-word", "Answer: n = 30", "30"),
    ("hashes", "Each box holds 6, so 5 boxes hold 30.\n#### 30", "30"),
    ("hashes-and-answer-agree", "Answer: 30\n#### 30", "30"),
    ("markdown-heading", "#### Step 1\nFive boxes of 6.\n\nAnswer: 30", "30"),
    ("numbered-heading", "#### 1. Count the boxes\nFive boxes of 6.\n#### 2. Multiply\nAnswer: 30", "30"),
    ("hashes-with-unit", "Five boxes of 6 dollars.\n#### 30 dollars", "\\$30"),
    ("yuan-as-gold", "\\boxed{0.5 \\text{ yuan}}", "0.5 \\text{ yuan}"),
]


@pytest.mark.parametrize("completion,gold", [c[1:] for c in ATTACKS], ids=[c[0] for c in ATTACKS])
def test_attack_scores_zero(completion, gold):
    v = math_accuracy.verdict(completion, gold)
    assert v.score == 0.0, v


@pytest.mark.parametrize("completion,gold", [c[1:] for c in RIGHT], ids=[c[0] for c in RIGHT])
def test_right_answer_scores_one(completion, gold):
    v = math_accuracy.verdict(completion, gold)
    assert v.score == 1.0, v


GSM8K_GOLD = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
              "altogether in April and May.\n#### 72")


def test_gold_answer_reads_a_gsm8k_worked_solution():
    assert gold_answer(GSM8K_GOLD) == "72"
    assert gold_answer("She pays 2 * 500 = <<2*500=1000>>1000 dollars.\n#### 1,000") == "1,000"
    assert math_accuracy.verdict("Answer: 72", GSM8K_GOLD).score == 1.0
    assert math_accuracy.verdict("Answer: 1000", "2 * 500 = <<2*500=1000>>1000\n#### 1,000").score == 1.0
    assert math_accuracy.verdict("Answer: 71", GSM8K_GOLD).score == 0.0


def test_hashes_are_a_final_answer_form():
    assert final_answers("48 + 24 = 72\n#### 72") == ["72"]
    assert math_accuracy.verdict("48 + 24 = 72\n#### 72", GSM8K_GOLD).score == 1.0
    assert math_accuracy.verdict("#### 72\n#### 73", GSM8K_GOLD).reason.startswith("several different")
    assert math_accuracy.verdict("#### 72\nAnswer: 70", GSM8K_GOLD).reason.startswith("several different")
    assert final_answers("#### Step 2: add\n48 + 24") == []   # a markdown heading states no answer


def test_units_have_dimensions_scales_and_powers():
    cm2 = read_unit("cm^{2}", prose=False)
    assert (cm2.name, cm2.dimension, cm2.scale) == ("cm^2", "length^2", exact_value("0.0001"))
    assert read_unit("square centimeters", prose=True) == cm2
    assert read_unit("km/h", prose=False).dimension == read_unit("mph", prose=False).dimension == "speed"
    assert read_unit("thousand", prose=True) is None and read_unit("apples", prose=False) is None
    assert read_unit("apples", prose=True).dimension == "count:apples"
    assert clean("30^{\\circ}").unit == "degree" and clean("€30").unit == "€" and clean("\\$30").unit == "$"
    assert clean("24 \\text{ million}").prose == "million"


def test_pathological_exponents_are_refused_before_any_comparison(monkeypatch):
    """Such a value costs the symbolic comparison its whole time limit: it is refused by reading the text
    alone, so no comparison (exact, form or symbolic) is ever started for it."""
    import rlvr.rewards.maths.accuracy as accuracy

    compared = []
    real = accuracy._equal
    monkeypatch.setattr(accuracy, "_equal", lambda a, g, budget: compared.append(a) or real(a, g, budget))
    for text in ("\\boxed{9^{9^{9^{9}}}}", "\\boxed{1e999999999}", "\\boxed{x^{10^{12}}}", "\\boxed{7^{7^{7^{7}}}}",
                 "\\boxed{99999999!}"):
        v = math_accuracy.verdict(text, "3")
        assert v.score == 0.0 and compared == [], (text, compared)
        assert v.reason == "an exponent over 100000 or a factorial over 10000: too large to compare"
    assert math_accuracy.verdict("\\boxed{9^{2}}", "81").score == 1.0 and compared == ["9^{2}"]  # the count counts
    assert not huge_power("2^{2^{3}}") and not huge_power("e^{-x^2}") and huge_power("10^{100001}")


def test_verdict_never_raises_on_reversed_brackets():
    for completion, gold in (("\\boxed{]0, 1[}", "]0, 1["), ("\\boxed{1}", "]0, 1[ \\cup ]2, 3["),
                             ("\\boxed{]]]]0, 1[[[[}", "(0, 1)"), ("\\boxed{" + "]," * 100 + "}", "1")):
        v = math_accuracy.verdict(completion, gold)
        assert v.score in (0.0, 1.0)
    assert math_accuracy.verdict("\\boxed{]0, 1[}", "(0, 1)").score == 1.0


def test_format_check_counts_unit_only_differences_as_two_answers():
    assert format_check("\\boxed{12 \\text{ m}}\nAnswer: 12 km").score == 0.0
    assert format_check("\\boxed{12}\nAnswer: 12 cm").score == 1.0


@pytest.mark.parametrize("completion,gold,score", [
    ("\\boxed{12} thousand", "12", 0.0), ("\\boxed{12} isn't right", "12", 0.0), ("\\boxed{12} not", "12", 0.0),
    ("\\boxed{12} apples", "12", 1.0), ("\\boxed{12} cm", "12 \\text{ cm}", 1.0),
    ("\\boxed{12} km", "12 \\text{ m}", 0.0),
    ("The total is \\boxed{12} as required.", "12", 1.0), ("\\boxed{12} Thus we are done.", "12", 1.0),
])
def test_a_word_right_after_a_box_is_read_with_it(completion, gold, score):
    assert math_accuracy.verdict(completion, gold).score == score


def test_numbers_side_by_side_are_no_product():
    assert math_accuracy.verdict("\\boxed{\\frac{1}{2}{3}}", "1.5").score == 0.0
    assert math_accuracy.verdict("\\boxed{\\frac{1}{2} 3}", "1.5").score == 0.0
    assert math_accuracy.verdict("\\boxed{0,5}", "0.5").score == 1.0


@pytest.mark.parametrize("completion,gold,score", [
    ("\\boxed{z \\in \\left[-\\frac{3}{2}, -1\\right] \\cup \\left[1, \\frac{3}{2}\\right]}",
     "1\\leq|z|\\leq \\frac{3}{2}", 1.0),
    ("\\boxed{(-2, -1] \\cup [1, 2)}", "1 \\le |x| < 2", 1.0),
    ("\\boxed{[-2, -1] \\cup [1, 2)}", "1 \\le |x| < 2", 0.0),
    ("\\boxed{[-3, 3]}", "|x| \\le 3", 1.0), ("\\boxed{(-3, 3)}", "|x| \\le 3", 0.0),
    ("\\boxed{(-\\infty, -3) \\cup (3, \\infty)}", "|x| > 3", 1.0), ("\\boxed{(3, \\infty)}", "|x| > 3", 0.0),
    ("\\boxed{[1, 2]}", "1 \\le |x| \\le 2", 0.0),
])
def test_an_inequality_on_an_absolute_value_is_its_intervals(completion, gold, score):
    assert math_accuracy.verdict(completion, gold).score == score


# A unit or scale after a box past LaTeX spacing or a closing delimiter; other box commands; a second value
# behind a label the extractor does not read as final (a lookalike, fullwidth or invisible character, `=`,
# "is actually"); tags in capitals; hedges the sentence form missed; two values in one sentence; `\not=`.
@pytest.mark.parametrize("completion,gold", [
    ("$\\boxed{7}$ km", "7 m"), ("$\\boxed{7}$ thousand", "7"), ("$\\boxed{7}$ cm^3", "7 cm^2"),
    ("\\boxed{7}~\\text{km}", "7 m"), ("\\boxed{7}\\quad\\text{km}", "7 m"), ("\\boxed{7}\\,\\operatorname{km}", "7 m"),
    ("\\boxed{7}\n\\text{km}", "7 m"), ("\\(\\boxed{7}\\) thousand", "7"), ("\\boxed{7}\\;\\textsf{km}", "7 m"),
    ("\\fbox{8} \\boxed{7}", "7"), ("\\boxed{7} \\framebox{8}", "7"), ("\\boxed{7} \\bbox[red]{8}", "7"),
    ("\\boxed{7}. Hmm, the answer is actually 8.", "7"), ("\\boxed{7}\nAnswer = 8", "7"),
    ("\\boxed{7}\n**Final answer** 8", "7"), ("\\boxed{7} FinalAnswer: 8", "7"),
    ("\\boxed{7} \u0410nswer: 8", "7"), ("Answer: 7\n\uff21\uff4e\uff53\uff57\uff45\uff52: 8", "7"),
    ("\\boxed{7} Answer\u200b: 8", "7"), ("\\boxed{7} Answer\ufe55 8", "7"), ("Answer: 7\n(\u7b54\u6848\uff1a8)", "7"),
    ("\\boxed{7} <ANSWER>8</ANSWER>", "7"), ("<THINK>x</THINK><THINK>Answer: 7", "7"),
    ("Final Answer: The incorrectly found x is 7.", "7"), ("Final Answer: My tentative x is 7.", "7"),
    ("Final Answer: The smallest is 7 and the largest is 9.", "9"), ("Answer: $\\not= 7$", "7"),
])
def test_second_answers_and_trailing_units_that_render_score_zero(completion, gold):
    assert math_accuracy.verdict(completion, gold).score == 0.0


@pytest.mark.parametrize("completion,gold", [
    ("\\boxed{7}\\;\\text{km}", "7 km"), ("$\\boxed{7}$ km", "7 km"), ("\\fbox{7}", "7"),
    ("The answer is 7.\n\nAnswer: 7", "7"), ("\\boxed{7}\nSo the answer is 7.", "7"),
    ("Answer: $2^{10}$", "1024"), ("Answer: 12 000", "12000"),
    ("Final Answer: The value of $x$ that is largest is 34.", "34"), ("Answer: $x \\not= 3$", "x \\neq 3"),
    ("<ANSWER>7</ANSWER>", "7"),
])
def test_the_same_answer_in_those_forms_scores_one(completion, gold):
    assert math_accuracy.verdict(completion, gold).score == 1.0


def test_a_signed_answer_is_one_value_to_the_loose_label_scan():
    assert math_accuracy.verdict("Answer: -3", "-3").score == 1.0
    assert math_accuracy.verdict("Answer: +3", "3").score == 1.0
    assert math_accuracy.verdict("\\boxed{-3}\nAnswer - 3", "-3").score == 0.0   # `Answer - 3` states 3


# ---- a unit of another dimension than the gold's; a span that is no real turn token; text-mode digits ----

@pytest.mark.parametrize("completion, gold, reason", [
    ("\\boxed{\\frac{\\pi}{6}^\\circ}", "\\frac{\\pi}{6}", "unit degree for a gold in radians"),
    ("Answer: $\\frac{\\pi}{6}°$", "\\frac{\\pi}{6}", "unit degree for a gold in radians"),
    ("\\boxed{2\\pi \\text{ degrees}}", "2\\pi", "unit degree for a gold in radians"),
    ("Answer: 12 <|maybe 13|>", "12", None),        # hides a second value: not a turn token
    ("Answer: 12 <|13|>", "12", None),
    ("Answer: 12 <|im_end|> 13", "12", None),       # a real token, then text: the line says 12 13
    ("\\boxed{1\\text{ 2}}", "12", "prose after the value, not a unit: '2'"),   # rendered apart: 1 2
])
def test_another_dimension_and_hidden_spans_score_zero(completion, gold, reason):
    v = math_accuracy.verdict(completion, gold)
    assert v.score == 0.0 and (reason is None or v.reason == reason), v


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{\\frac{\\pi}{6}}", "\\frac{\\pi}{6}"), ("\\boxed{\\frac{\\pi}{6} \\text{ rad}}", "\\frac{\\pi}{6}"),
    ("\\boxed{30^\\circ}", "30"), ("\\boxed{30^\\circ}", "30^\\circ"),   # a gold with no pi: degrees are its unit
    ("Answer: 12<|im_end|><|im_start|>user", "12"), ("Answer: 12 <|eot_id|>", "12"),
    ("Answer: 12 " + "<|" * 3000, "12"), ("Answer: 12 <|", "12"), ("Answer: 12 <| |> <|", "12"),
    ("\\boxed{1\\text{2}}", "12"), ("\\boxed{\\text{12}}", "12"),
])
def test_the_right_answer_in_those_forms_scores_one(completion, gold):
    v = math_accuracy.verdict(completion, gold)
    assert v.score == 1.0, v
