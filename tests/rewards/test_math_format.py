import pytest

from rlvr.rewards import format_reward, make_format_reward, make_overlong_reward, math_accuracy, overlong_score
from rlvr.rewards.maths.answer import boxed_contents


@pytest.mark.parametrize("text, gold, score", [
    ("3 + 4 = 7\nAnswer: 7", "7", 1.0),
    ("Answer: -4", "-4", 1.0),
    ("The sum is \\boxed{12}.", "12", 1.0),
    ("<answer> 1,000 </answer>", "1000", 1.0),
    ("answer: 7.", "7", 1.0),
    ("Answer: 8", "7", 0.0),
    ("3 + 4 = 7", "7", 0.0),                         # no stated final answer
    ("Answer: 7\nAnswer: 8", "7", 0.0),              # two different final answers
    ("\\boxed{7} or \\boxed{8}", "7", 0.0),
    ("Answer: 7 or 8", "7", 0.0),
    ("<think>Answer: 7", "7", 0.0),                  # unclosed think
    ("<think>Answer: 8</think>Answer: 7", "7", 1.0), # only after the last </think>
    ("Answer: 1,00", "100", 0.0),
])
def test_math_accuracy(text, gold, score):
    assert math_accuracy([text], answer=[gold]) == [score]


def test_verdict_reason_and_chat_messages():
    v = math_accuracy.verdict("Answer: 5", "6")
    assert (v.score, v.reason, v.extracted) == (0.0, "wrong: 5 != 6", "5")
    chat = [[{"role": "assistant", "content": "Answer: 6"}]]
    assert math_accuracy(chat, answer=["6"], difficulty=["d1"]) == [1.0]


@pytest.mark.parametrize("text, score", [
    ("6 * 2 = 12\nAnswer: 12", 1.0),
    ("Answer: 12\n", 1.0),
    ("Answer: 12\nI hope this helps", 0.0),
    ("12", 0.0),
    ("Answer: 1 or 2", 0.0),
    ("Answer: 1\nAnswer: 2", 0.0),
    ("<think>so 12</think>\nAnswer: 12", 1.0),
    ("<think>so 12\nAnswer: 12", 0.0),
    ("Answer: ", 0.0),
])
def test_format_reward(text, score):
    assert format_reward([text]) == [score]


@pytest.mark.parametrize("style, text, score", [
    ("boxed", "so \\boxed{12}.", 1.0),
    ("boxed", "\\boxed{12} is it, I think", 0.0),
    ("tag", "<answer>12</answer>", 1.0),
    ("tag", "Answer: 12", 0.0),
    ("any", "\\boxed{12} is it, I think", 1.0),
])
def test_format_styles(style, text, score):
    assert make_format_reward(style)([text]) == [score]


# The form filled with nothing: invisible characters or bare punctuation earn no format reward; an empty
# set or list (`{}`, `\\{\\}`, `[]`) and a symbol (`∅`, `∞`) are answers.
@pytest.mark.parametrize("style, text, score", [
    ("answer_line", "Answer: \u200b", 0.0), ("answer_line", "Answer: \u2060\ufeff", 0.0),
    ("answer_line", "Answer: ?", 0.0), ("answer_line", "Answer: ...", 0.0), ("boxed", "\\boxed{\u200b}", 0.0),
    ("tag", "<answer>!?</answer>", 0.0), ("tag", "<answer>\u200b</answer>", 0.0),
    ("answer_line", "Answer: {}", 1.0), ("boxed", "\\boxed{\\{\\}}", 1.0), ("tag", "<answer>[]</answer>", 1.0),
    ("answer_line", "Answer: \u2205", 1.0), ("boxed", "\\boxed{\\infty}", 1.0), ("answer_line", "Answer: -3", 1.0),
])
def test_a_final_answer_that_states_nothing_earns_no_format_reward(style, text, score):
    assert make_format_reward(style)([text]) == [score]


def test_overlong_soft_punishment():
    # max 20, buffer 8: free up to 12 tokens, then -1/8 per token down to -1 at 20
    assert [overlong_score(n, 20, 8) for n in (5, 12, 13, 16, 20, 25)] == [0.0, 0.0, -0.125, -0.5, -1.0, -1.0]
    reward = make_overlong_reward(20, 8, penalty=0.5)
    assert reward(["a", "b"], completion_ids=[[1] * 12, [1] * 18]) == [0.0, -0.375]


def test_helpers():
    assert boxed_contents("\\boxed{\\frac{1}{2}} and \\boxed{3") == ["\\frac{1}{2}"]
