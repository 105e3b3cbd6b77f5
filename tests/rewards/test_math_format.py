import pytest

from rlvr.rewards import format_reward, math_accuracy
from rlvr.rewards.answer import boxed_contents, parse_integer


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
    ("Answer: twelve", 0.0),
    ("Answer: 1\nAnswer: 2", 0.0),
])
def test_format_reward(text, score):
    assert format_reward([text]) == [score]


def test_helpers():
    assert boxed_contents("\\boxed{\\frac{1}{2}} and \\boxed{3") == ["\\frac{1}{2}"]
    assert parse_integer("+1,234") == 1234
    assert parse_integer("12.5") is None
