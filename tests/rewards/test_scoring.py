import pytest

from rlvr.errors import RlvrError
from rlvr.rewards import build_rewards, score_batch, strict_rewards
from rlvr.rewards.base import RewardFunction, Scores
from rlvr.text import clean_reason
from rlvr.rewards.code import make_code_tests
from tests.conftest import python_block


def length_reward(completions, **kw):
    return [len(c) / 10 for c in completions]


def broken_reward(completions, **kw):
    raise RuntimeError("boom")


def picky_reward(completions, **kw):
    if any("x" in c for c in completions):
        raise ValueError("x")
    return [1.0] * len(completions)


def partial_reward(completions, **kw):
    return [None, 1.0]


def test_weighted_sum_and_reasons():
    fns = build_rewards({"correctness": 1.0, "format": 0.5})
    s = score_batch(fns, ["Answer: 3", "3"], {"answer": ["3", "3"]})
    assert s.total == [1.5, 0.0]
    assert s.reasons["correctness"] == ["correct", "no final answer"]
    assert s.errors == {"correctness": 0, "format": 0}
    assert s.failed == {"correctness": [False, False], "format": [False, False]}


def test_custom_functions_by_import_path():
    fns = build_rewards({"tests.rewards.test_scoring:length_reward": 2.0})
    s = score_batch(fns, ["abcde"], {"answer": ["1"]})
    assert s.total == [1.0]


def test_raising_reward_scores_zero_and_is_counted():
    seen = []
    fns = [RewardFunction(name="broken", weight=1.0, fn=broken_reward),
           RewardFunction(name="len", weight=1.0, fn=length_reward)]
    s = score_batch(fns, ["ab", "abcd"], {}, on_error=lambda name, e, row: seen.append((name, str(e))))
    assert s.per_function["broken"] == [0.0, 0.0]
    assert s.errors == {"broken": 2, "len": 0}
    assert s.failed["broken"] == [True, True]
    assert s.total == [0.2, 0.4]
    assert seen == [("broken", "boom")]
    assert "RuntimeError: boom" in s.reasons["broken"][0]


def test_none_means_not_applicable():
    s = score_batch([RewardFunction(name="p", weight=1.0, fn=partial_reward)], ["a", "b"], {})
    assert s.total == [0.0, 1.0]
    assert s.reasons["p"][0] == "not applicable"


def test_unknown_reward_names_builtins():
    with pytest.raises(RlvrError, match="unknown reward 'corectness'.*correctness, format"):
        build_rewards({"corectness": 1.0})
    with pytest.raises(RlvrError, match="cannot load reward function 'no_such_mod:f'"):
        build_rewards({"no_such_mod:f": 1.0})


def test_a_misspelt_reward_function_or_a_bare_file_says_what_to_write(tmp_path):
    """The walls a newcomer's first rewards.weights hits: a function name misspelt (the file's functions are
    listed, the nearest first) and a file named without its function."""
    (tmp_path / "my_rewards.py").write_text("import re\nfrom math import sqrt\n\ndef accuracy(completions, **kw):\n"
                                            "    return [1.0] * len(completions)\n\ndef _helper():\n    pass\n\n"
                                            "def compute_score(data_source, solution_str, ground_truth):\n    return 1.0\n")
    path = tmp_path / "my_rewards.py"
    with pytest.raises(RlvrError) as e:
        build_rewards({f"{path}:accuracyy": 1.0})
    assert str(e.value) == (f"cannot load reward function '{path}:accuracyy': {path} has no 'accuracyy'; did you "
                            "mean 'accuracy'? (it defines accuracy, compute_score)")  # not re, sqrt or _helper
    with pytest.raises(RlvrError, match=r"verl compute_score '.*:score': .* has no 'score'; did you mean "
                                        r"'compute_score'\?"):
        build_rewards({f"verl:{path}:score": 1.0})
    with pytest.raises(RlvrError, match=r"^reward 'my_rewards.py' in rewards.weights names a file, not a function "
                                        r"in it: write 'my_rewards.py:FUNCTION' \(TRL's form\) or "
                                        r"'verl:my_rewards.py:compute_score'$"):
        build_rewards({"my_rewards.py": 1.0})


def test_selected_groups_count_only_their_own_errors():
    # dynamic sampling keeps some groups (G = 2) of each round and concatenates them: the errors are
    # those of the kept completions, never a whole round's count once per kept group
    fns = [RewardFunction(name="picky", weight=1.0, fn=picky_reward)]
    a = score_batch(fns, ["x", "xb", "xc", "xd"], {})  # raises on each: all 4 of round a fail
    b = score_batch(fns, ["e", "f", "g", "h"], {})  # no error in round b
    assert a.errors == {"picky": 4} and b.errors == {"picky": 0}
    kept = Scores.concat([a.select([2, 3]), b.select([0, 1]), b.select([2, 3])])
    assert kept.errors == {"picky": 2}  # 2 of the 6 kept completions come from round a
    assert kept.failed["picky"] == [True, True, False, False, False, False]
    assert kept.total == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    both = Scores.concat([a.select([0, 1]), a.select([2, 3])])
    assert both.errors == {"picky": 4}  # every group of round a kept: 4 errors in 4 completions


def test_strict_rewards_are_those_that_check_correctness():
    fns = build_rewards({"format": 0.5, "correctness": 1.0, "tests.rewards.test_scoring:length_reward": 1.0})
    names = lambda rs: [rf.name for rf in rs]
    # format says it is not strict; length_reward does not say, so it is strict only for the audit
    assert names(strict_rewards(fns)) == ["correctness"]
    assert names(strict_rewards(fns, unknown_is_strict=True)) == ["correctness", "tests.rewards.test_scoring:length_reward"]


def test_code_tests_count_as_the_strict_reward():
    """Training reads pass rates (and the curriculum its signal) from the strict reward; the code reward
    did not say it checks correctness, so code tasks had no pass_rate/* metrics."""
    from rlvr.rewards import build_rewards, strict_rewards

    rewards = build_rewards({"code_tests": 1.0, "format": 0.2}, 64, 8, 1.0)
    assert [rf.name for rf in strict_rewards(rewards)] == ["code_tests"]


def test_built_ins_are_rewards_whose_abilities_are_fields_and_plain_functions_stay_plain():
    from rlvr.rewards import Reward, format_reward, math_accuracy, code_tests, make_overlong_reward

    assert isinstance(math_accuracy, Reward) and math_accuracy.__name__ == "math_accuracy"   # TRL logs by it
    assert (math_accuracy.columns, math_accuracy.checks_correctness) == (("answer",), True)
    assert (format_reward.columns, format_reward.checks_correctness) == ((), False)
    assert code_tests.checks_correctness and code_tests.verdict("no code", {"kind": "stdio", "cases": [{"stdin": "", "stdout": "1"}]}).outcome == "no_code"
    assert "visible_only" in code_tests.outcomes
    assert code_tests.config.partial is False and make_code_tests(partial=True).config.partial is True
    # called as TRL calls a reward function, by keyword, extra columns ignored
    assert math_accuracy(["Answer: 4", "Answer: 5"], answer=["4", "4"], prompts=["p", "p"]) == [1.0, 0.0]
    overlong = make_overlong_reward(10, 4)   # free up to 6 tokens, -1 at 10: 8 tokens -> -0.5
    assert overlong(["x", "y"], completion_ids=[[0] * 6, [0] * 8]) == [0.0, -0.5]
    rewards = build_rewards({"correctness": 1.0, "tests.rewards.test_scoring:length_reward": 1.0})
    assert rewards[0].reward is math_accuracy and rewards[1].reward is None
    assert rewards[1].fn.__name__ == "length_reward" and not isinstance(rewards[1].fn, Reward)   # as given


# ---- reasons are printable and bounded: they may quote a hostile program's text ------------------

def test_reasons_are_sanitised():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [], "expected": 1}]}
    hostile = python_block("def f():\n    raise ValueError('\\x1b[2J\\rok\\u202e' + 'x' * 5000)")
    v = make_code_tests(timeout_s=1.0).verdicts([hostile], tests=[spec])[0]
    assert v.reason.startswith("failed case 1: raised ValueError: \\x1b[2J\\rok\\u202e")
    assert v.reason.isprintable() and len(v.reason) <= 300
    noisy = RewardFunction(name="noisy", weight=1.0, fn=lambda completions, **kw: 1 / 0)
    assert clean_reason("a\nb\tc") == "a\\nb\\tc"
    scores = score_batch([noisy], ["x"], {})
    assert scores.reasons["noisy"][0].isprintable()


def test_build_rewards_refuses_two_files_of_one_name(tmp_path):
    """Metrics name a file's reward by the file name alone, so two such files would share reward/<name>."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "r.py").write_text("def f(completions, **kw):\n    return [1.0] * len(completions)\n")
    one = build_rewards({f"{tmp_path}/a/r.py:f": 1.0})
    assert [rf.name for rf in one] == ["r.py:f"]
    with pytest.raises(RlvrError, match=r"two rewards are both named 'r.py:f' \(file names without their folders\)"):
        build_rewards({f"{tmp_path}/a/r.py:f": 1.0, f"{tmp_path}/b/r.py:f": 1.0})
