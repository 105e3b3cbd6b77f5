import pytest

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.tasks import build_splits, normalise
from rlvr.tasks.arithmetic import EXAMPLES, evaluate, expression


def test_precedence():
    assert evaluate([2, 3, 4], ["+", "*"]) == 14
    assert evaluate([2, 3, 4], ["*", "-"]) == 2
    assert evaluate([9, 5, 3], ["-", "-"]) == 1
    assert expression([2, 3], ["*"]) == "2 * 3"


def test_splits_disjoint_sized_and_seeded():
    cfg = TaskConfig(params={"digits": 1, "operands": 2, "operators": "+-*"}, heldout_size=50, ood_size=40)
    s = build_splits(cfg)
    assert len(s.heldout) == 50 and len(s.ood) == 40
    assert len(s.train) == 300 - 50 - 3  # every remaining problem; the 3 worked examples excluded
    keys = [{normalise(p.question) for p in split} for split in (s.train, s.heldout, s.ood)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    shots = {normalise(f"What is {q}? End with a line 'Answer: <number>'.") for q, _ in EXAMPLES}
    assert not (shots & (keys[0] | keys[1] | keys[2]))
    assert all(p.difficulty == "d2-n2" for p in s.ood)
    assert build_splits(cfg).heldout == s.heldout
    assert build_splits(TaskConfig(heldout_size=50, ood_size=40, seed=1)).heldout != s.heldout


def test_answers_are_right():
    s = build_splits(TaskConfig(heldout_size=10, ood_size=10))
    for p in s.heldout + s.ood:
        expr = p.question.removeprefix("What is ").split("?")[0]
        assert int(p.answer) == eval(expr)  # our own generated digits and operators only


def test_large_space_is_sampled():
    s = build_splits(TaskConfig(params={"digits": 3, "operands": 3}, ood_params={"digits": 4, "operands": 3},
                                heldout_size=20, ood_size=5, train_size=30))
    assert len(s.train) == 30 and len(s.heldout) == 20


def test_bad_settings():
    with pytest.raises(RlvrError, match="operators"):
        build_splits(TaskConfig(params={"operators": "+/"}))
    with pytest.raises(RlvrError, match="heldout_size"):
        build_splits(TaskConfig(params={"digits": 1, "operands": 2, "operators": "+"}, heldout_size=100))
