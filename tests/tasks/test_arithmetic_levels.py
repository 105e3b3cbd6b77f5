"""Arithmetic digit levels (task.params.min_digits) and the worked solutions every problem carries."""
import random
import re
from collections import Counter

import pytest

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.rewards.maths.accuracy import math_accuracy
from rlvr.tasks import build_splits
from rlvr.tasks.arithmetic import EXAMPLES, arithmetic_splits, solution

_CHAIN = re.compile(r"-?\d+(?: [-+*] -?\d+)*(?: = -?\d+(?: [-+*] -?\d+)*)+")
_BLOCK = re.compile(r"(\d+) ([+-]) (\d+), column by column:")


def assert_steps_hold(text: str) -> None:
    """Every `a op b = c = ...` chain is true, and each column block's written digits make its result."""
    for m in _CHAIN.finditer(text):
        sides = m.group(0).split(" = ")
        assert len({eval(s) for s in sides}) == 1, (m.group(0), text)  # our own digits and + - * only
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _BLOCK.fullmatch(line)
        if not m:
            continue
        digits, j = [], i + 1
        while not lines[j].startswith(f"{m[1]} {m[2]} {m[3]} = "):
            digits.append(re.search(r"write (?:the carry )?(\d)$|write (\d) carry \d$", lines[j]).group(1, 2))
            j += 1
        written = "".join(a or b for a, b in reversed(digits))
        result = int(lines[j].split(" = ")[1])
        assert result == eval(f"{m[1]} {m[2]} {m[3]}") == int(written), text


def test_column_addition_by_hand():
    assert solution([47, 85], ["+"]) == (
        "47 + 85, column by column:\n"
        "ones: 7 + 5 = 12, write 2 carry 1\n"
        "tens: 4 + 8 + 1 = 13, write 3 carry 1\n"
        "hundreds: write the carry 1\n"
        "47 + 85 = 132\n"
        "Answer: 132")


def test_column_subtraction_and_negative_results_by_hand():
    assert solution([100, 1], ["-"]) == (
        "100 - 1, column by column:\n"
        "ones: borrow 1 from the tens, 10 - 1 = 9, write 9\n"
        "tens: borrow 1 from the hundreds, 10 - 1 = 9, write 9\n"
        "hundreds: 1 - 1 = 0, write 0\n"
        "100 - 1 = 99\n"
        "Answer: 99")
    assert solution([47, 85], ["-"]) == (
        "47 - 85 is negative, so work out 85 - 47 and negate it:\n"
        "85 - 47, column by column:\n"
        "ones: borrow 1 from the tens, 15 - 7 = 8, write 8\n"
        "tens: 8 - 4 - 1 = 3, write 3\n"
        "85 - 47 = 38\n"
        "so 47 - 85 = -38\n"
        "Answer: -38")


def test_products_and_precedence_by_hand():
    assert solution([47, 36], ["*"]) == "47 * 36 = 40 * 36 + 7 * 36 = 1440 + 252 = 1692\nAnswer: 1692"
    assert solution([40, 7], ["*"]) == "40 * 7 = 280\nAnswer: 280"
    assert solution([3, 2, 4, 5], ["*", "-", "+"]) == "3 * 2 = 6\nNow 6 - 4 + 5\n6 - 4 = 2\n2 + 5 = 7\nAnswer: 7"
    assert solution([3, 9, 5], ["-", "+"]) == "3 - 9 = -6\n-6 + 5 = -1\nAnswer: -1"


def test_one_digit_examples_are_the_worked_form():
    for expr, worked in EXAMPLES:
        a, op, b = expr.split()
        assert solution([int(a), int(b)], [op]) == worked


def test_every_solution_is_correct_and_scores_one():
    s = arithmetic_splits(digits=3, operands=3, operators="+-*", ood_digits=4, ood_operands=4,
                          heldout_size=200, ood_size=300, train_size=2000, few_shot=0, seed=3, min_digits=1)
    rng = random.Random(0)
    extra = [([rng.randint(0, 9999) for _ in range(2)], [op]) for op in "+-*" for _ in range(300)]
    problems = s.train + s.heldout + s.ood
    assert len(problems) == 2500
    scores = math_accuracy([p.solution for p in problems], answer=[p.answer for p in problems])
    assert scores == [1.0] * len(problems)
    for p in problems:
        assert p.solution.endswith(f"\nAnswer: {p.answer}")
        assert_steps_hold(p.solution)
    for ns, ops in extra:
        assert_steps_hold(solution(ns, ops))


def test_levels_balanced_and_labelled():
    s = build_splits(TaskConfig(params={"min_digits": 1, "digits": 3, "operands": 2}, ood_params={"digits": 4},
                                heldout_size=30, ood_size=10, train_size=300))
    assert Counter(p.difficulty for p in s.train) == {"d1-n2": 100, "d2-n2": 100, "d3-n2": 100}
    assert Counter(p.difficulty for p in s.heldout) == {"d1-n2": 10, "d2-n2": 10, "d3-n2": 10}
    assert {p.difficulty for p in s.ood} == {"d4-n2"}
    for p in s.train + s.heldout:
        top = 10 ** int(p.difficulty[1])
        numbers = [int(n) for n in re.findall(r"\d+", p.question.split("?")[0])]
        assert all(n < top for n in numbers)
    one_level = build_splits(TaskConfig(params={"min_digits": 2, "digits": 2}, ood_params={"digits": 3},
                                        heldout_size=10, ood_size=5, train_size=20))
    assert {p.difficulty for p in one_level.train + one_level.heldout} == {"d2-n2"}


def test_min_digits_out_of_range():
    with pytest.raises(RlvrError, match="task.params.min_digits must be between 1 and task.params.digits"):
        build_splits(TaskConfig(params={"min_digits": 3, "digits": 2}))


def test_unknown_arithmetic_setting_names_the_valid_ones():
    with pytest.raises(RlvrError, match=r"task.ood_params: the arithmetic task has no setting operators; its "
                                        r"settings are digits \(default 2\), operands \(default 2\)"):
        build_splits(TaskConfig(ood_params={"operators": "+"}))


def test_step_checker_catches_a_wrong_step():
    good = solution([47, 85], ["+"])
    with pytest.raises(AssertionError):
        assert_steps_hold(good.replace("7 + 5 = 12", "7 + 5 = 13"))
    with pytest.raises(AssertionError):
        assert_steps_hold(good.replace("write 3 carry 1", "write 4 carry 1"))
