import pytest

from rlvr.errors import RlvrError
from rlvr.rewards import build_rewards, score_batch
from rlvr.rewards.base import RewardFunction


def length_reward(completions, **kw):
    return [len(c) / 10 for c in completions]


def broken_reward(completions, **kw):
    raise RuntimeError("boom")


def partial_reward(completions, **kw):
    return [None, 1.0]


def test_weighted_sum_and_reasons():
    fns = build_rewards({"correctness": 1.0, "format": 0.5})
    s = score_batch(fns, ["Answer: 3", "3"], {"answer": ["3", "3"]})
    assert s.total == [1.5, 0.0]
    assert s.reasons["correctness"] == ["correct", "no final answer"]
    assert s.errors == {"correctness": 0, "format": 0}


def test_custom_functions_by_import_path():
    fns = build_rewards({"tests.rewards.test_scoring:length_reward": 2.0})
    s = score_batch(fns, ["abcde"], {"answer": ["1"]})
    assert s.total == [1.0]


def test_raising_reward_scores_zero_and_is_counted():
    seen = []
    fns = [RewardFunction("broken", 1.0, broken_reward), RewardFunction("len", 1.0, length_reward)]
    s = score_batch(fns, ["ab", "abcd"], {}, on_error=lambda name, e: seen.append((name, str(e))))
    assert s.per_function["broken"] == [0.0, 0.0]
    assert s.errors["broken"] == 2
    assert s.total == [0.2, 0.4]
    assert seen == [("broken", "boom")]
    assert "RuntimeError: boom" in s.reasons["broken"][0]


def test_none_means_not_applicable():
    s = score_batch([RewardFunction("p", 1.0, partial_reward)], ["a", "b"], {})
    assert s.total == [0.0, 1.0]
    assert s.reasons["p"][0] == "not applicable"


def test_unknown_reward_names_builtins():
    with pytest.raises(RlvrError, match="unknown reward 'corectness'.*correctness, format"):
        build_rewards({"corectness": 1.0})
    with pytest.raises(RlvrError, match="cannot load reward function 'no_such_mod:f'"):
        build_rewards({"no_such_mod:f": 1.0})
