"""The maths checker's limits against adversarial completions: one time budget per answer
however many pieces it has, linear-time extraction on adversarial completions, and a <think>
opened after the last </think> left open."""

import pytest

from rlvr.eval.estimators import stated_answer
from rlvr.rewards import format_reward, make_format_reward, math_accuracy
from rlvr.rewards.workers import current

TOWER = "5^{5^{5^{5^5}}}"  # the symbolic worker times out on it (or runs out of memory)


# ---- one time budget per answer: a set-valued gold must not multiply it by its elements ------------

@pytest.mark.slow  # waits out a wall clock
def test_a_set_answer_spends_one_time_budget_not_one_per_element(monkeypatch):
    # the tower is refused before symbolic work; the budget is the backstop for what that test misses
    monkeypatch.setattr("rlvr.rewards.maths.accuracy.huge_power", lambda text: False)
    gold = "\\{" + ", ".join(str(k) for k in range(1, 11)) + "\\}"
    answer = "\\{" + ", ".join([TOWER] + [str(k) for k in range(2, 11)]) + "\\}"
    worker = current().maths
    worker.compare("1", "1")  # started outside the count
    before = worker.restarts
    v = math_accuracy.verdict(f"\\boxed{{{answer}}}", gold)
    # With a budget per element the tower would be tried against each of the 10 gold elements, 2 s and
    # one worker restart each (20 s); the exact matches pair off first and the one symbolic comparison
    # left spends the answer's whole budget.
    assert worker.restarts - before <= 1  # a budget per element: 10
    assert v.score == 0.0 and v.reason.startswith("element 5^{5^{5^{5^5}}} is not in the gold"), v


@pytest.mark.slow  # waits out a wall clock
def test_a_matrix_of_towers_stops_at_the_first_spent_budget():
    cells = " & ".join([TOWER] * 4)
    worker = current().maths
    worker.compare("1", "1")
    before = worker.restarts
    v = math_accuracy.verdict(f"\\boxed{{\\begin{{pmatrix}} {cells} \\end{{pmatrix}}}}",
                              "\\begin{pmatrix} 1 & 2 & 3 & 4 \\end{pmatrix}")
    assert v.score == 0.0 and worker.restarts - before <= 1, v


# ---- answer-line and format checks are linear in adversarial 80 kB completions -----------------
# (Their time is printed by bench/math_checks.py; here, that the verdicts are right.)

BLANKS = " " * 80_000


def test_a_long_blank_run_on_the_answer_line():
    text = "\\boxed{42}\nAnswer: 42" + BLANKS + "."  # the former `(.*?)[ \t]*$`: ~40 s
    assert math_accuracy([text], answer=["42"]) == [1.0]
    assert format_reward([text]) == [1.0]
    v = math_accuracy.verdict("Answer: 1" + BLANKS + ",x", "1")
    assert (v.score, v.reason) == (0.0, "final answer longer than 300 characters")


def test_many_boxes_and_tags_not_at_the_end():
    boxes = ("\\boxed{42}" + "x" * 10) * 4000  # 80 kB: the end checks, now string operations, still right
    assert math_accuracy([boxes], answer=["42"]) == [1.0]
    v = make_format_reward("boxed").verdict(boxes)
    assert (v.score, v.reason) == (0.0, "does not end with the final answer as boxed")
    assert make_format_reward("boxed").verdict(boxes + "} .$").score == 1.0
    tags = "<answer>42</answer>x" * 4000
    v = make_format_reward("tag").verdict(tags)
    assert (v.score, v.reason) == (0.0, "does not end with the final answer as tag")
    assert make_format_reward("tag").verdict(tags[:-1] + "\n").score == 1.0


def test_many_answer_lines_ending_in_blanks():
    lines = ("Answer: 7" + " " * 40 + "8\n") * 1600  # 80 kB of answer lines: "7 8", several numbers
    v = math_accuracy.verdict(lines, "7")
    assert v.score == 0.0 and v.reason.startswith("a list of candidates"), v
    assert format_reward([lines + "Answer: 8"]) == [0.0]


# ---- a second <think> after the last </think> -------------------------------------------------

def test_a_think_opened_after_the_last_close_is_unclosed():
    text = "<think>a</think><think>so it is 42. Answer: 42"
    assert math_accuracy.verdict(text, "42") == math_accuracy.verdict("<think>Answer: 42", "42")
    assert math_accuracy.verdict(text, "42").reason == "unclosed <think>"
    assert format_reward([text]) == [0.0] and stated_answer(text) is None
    assert math_accuracy(["<think>a</think><think>b</think> Answer: 42"], answer=["42"]) == [1.0]


# ---- repeated unclosed <answer> tags are scanned in linear time -------------------------------

class Scanned(str):
    """A completion that counts the characters its `find` calls read: up to the end of the match, or to
    the end of the text when there is none."""

    def __init__(self, text):
        self.read = 0

    def find(self, sub, start=0, *rest):
        i = str.find(self, sub, start, *rest)
        self.read += (len(self) if i == -1 else i + len(sub)) - start
        return i


@pytest.mark.parametrize("n", [1000, 2000, 4000])
def test_unclosed_answer_tags_are_read_once(n):
    from rlvr.rewards.maths.answer import answer_tags
    flood = Scanned("<answer>" * n)
    # the first <answer> is found at 0 (8 characters read); its close is looked for once, to the end
    # (8n - 8 more): 8n in all, where a regex retrying from each unclosed tag reads about 4n^2 (80 kB: ~6 s)
    assert answer_tags(flood) == [] and flood.read == 8 * n
    closed = Scanned("<answer>1</answer>" * n + "<answer>")
    assert answer_tags(closed) == ["1"] * n and closed.read == len(closed)  # each character read once


def test_unclosed_answer_tags_reach_the_linear_scan(monkeypatch):
    from rlvr.rewards.maths import answer
    from rlvr.rewards.maths.accuracy import math_accuracy_verdict
    calls = []
    scan = answer.answer_tags
    monkeypatch.setattr(answer, "answer_tags", lambda text: calls.append(len(text)) or scan(text))
    flood = "<answer>" * 10000
    v = math_accuracy_verdict(flood + "\\boxed{5}", "5")
    assert v.score == 1.0 and calls and all(k >= len(flood) for k in calls), v
    assert answer.final_answers("<answer>1</answer><answer> 2</answer>x<answer>3") == ["1", "2"]


# ---- an unbraced chain of powers associates right: its exponent is the rest of the chain ------------

@pytest.mark.parametrize("text", ["Answer: 2**10**10", "\\boxed{2^2^2^2^2^2^2}", "Answer: 9 ** 9 ** 9",
                                  "\\boxed{2^{3}^{9^9}}"])
def test_an_unbraced_power_tower_is_refused_before_sympy(text):
    v = math_accuracy.verdict(text, "3")
    assert (v.score, v.reason) == (0.0, "an exponent over 100000 or a factorial over 10000: too large to compare")


def test_a_small_unbraced_power_chain_is_still_compared():
    assert math_accuracy.verdict("\\boxed{2^3^2}", "512").score == 1.0
