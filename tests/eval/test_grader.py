import re

import pytest

from rlvr.errors import RlvrError
from rlvr.eval.grader import Grader, choose_grader
from rlvr.eval.grading import grade
from rlvr.eval.sampled import problem_record, user_vote
from rlvr.rewards import build_rewards
from rlvr.rewards.base import RewardFunction, RewardFunctionError
from rlvr.rewards.verl import from_compute_score
from rlvr.tasks import Problem


def hashes(completions, answer, **kwargs):
    """A TRL reward reading GSM8K's '#### N' final answer."""
    out = []
    for c, a in zip(completions, answer):
        m = re.search(r"####\s*(-?\d+)", c)
        out.append(1.0 if m and m.group(1) == str(a) else 0.0)
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's gsm8k convention: 1 for the right '#### N', format_score 0.1 for a wrong one, 0 without."""
    m = re.search(r"####\s*(-?\d+)", solution_str)
    return 0.0 if m is None else 1.0 if m.group(1) == ground_truth else 0.1


def fmt(completions, **kwargs):
    return [0.5] * len(completions)


def test_choose_grader_prefers_the_builtin_checker_when_the_rewards_have_it():
    rewards = build_rewards({"correctness": 1.0, "format": 0.2}) + [RewardFunction(name="m:hashes", weight=1.0,
                                                                                   fn=hashes)]
    g = choose_grader(rewards)
    assert not g.user and g.name == "builtin" and "'correctness'" in g.why


def test_choose_grader_takes_a_verl_scorer_before_a_heavier_trl_function():
    rewards = [RewardFunction(name="m:fmt", weight=2.0, fn=fmt),
               RewardFunction(name="verl:s.py:compute_score", weight=1.0,
                                                                 fn=from_compute_score(compute_score))]
    g = choose_grader(rewards + build_rewards({"format": 0.2}))
    assert (g.name, g.user, g.threshold) == ("verl:s.py:compute_score", True, 1.0)
    assert "verl compute_score" in g.why and "eval.grader=NAME" in g.line()


def test_choose_grader_takes_the_user_reward_of_highest_weight_then_the_first():
    a, b, c = (RewardFunction(name=n, weight=w, fn=hashes) for n, w in (("m:a", 0.5), ("m:b", 1.0), ("m:c", 1.0)))
    assert choose_grader([a, b, c]).name == "m:b"
    assert choose_grader([a]).why == "your only reward"
    assert not choose_grader(build_rewards({"format": 1.0})).user


def test_choose_grader_by_name_and_its_errors():
    rewards = build_rewards({"correctness": 1.0, "format": 0.2}) + [RewardFunction(name="m:hashes", weight=1.0,
                                                                                   fn=hashes)]
    g = choose_grader(rewards, "m:hashes", 0.5)
    assert (g.name, g.threshold, g.why) == ("m:hashes", 0.5, "eval.grader")
    assert not choose_grader(rewards, "builtin").user and not choose_grader(rewards, "correctness").user
    with pytest.raises(RlvrError, match=r"'m:nope' is not a key of rewards.weights \(keys: correctness, format, m:hashes\)"):
        choose_grader(rewards, "m:nope")
    with pytest.raises(RlvrError, match="does not check answers"):
        choose_grader(rewards, "format")


P = Problem(question="Tom has 3 apples and buys 5 more. How many?", answer="8")
TEXTS = ["3+5=8\n#### 8", "The total is 8", "#### 7", "Answer: 8"]


def test_grade_with_a_user_grader_counts_its_verdict_and_keeps_the_format_free_grade():
    g = grade([P] * 4, TEXTS, Grader(name="m:hashes", reward=RewardFunction(name="m:hashes", weight=1.0, fn=hashes)))
    # the user's check: only '#### 8' is right; format-free: also the bare 8 and the built-in answer line
    assert [x["correct"] for x in g] == [1.0, 0.0, 0.0, 0.0]
    assert [x["lenient"] for x in g] == [1.0, 1.0, 0.0, 1.0]
    assert [x["score"] for x in g] == [1.0, 0.0, 0.0, 0.0]
    builtin = grade([P] * 4, TEXTS)
    # the built-in checker reads GSM8K's `#### 8` line too, and refuses the wrong `#### 7`
    assert [x["correct"] for x in builtin] == [1.0, 0.0, 0.0, 1.0] and "score" not in builtin[0]


def test_grade_with_a_verl_grader_applies_the_threshold_to_its_score():
    rf = RewardFunction(name="verl:s.py:compute_score", weight=1.0, fn=from_compute_score(compute_score))
    g = grade([P] * 3, ["#### 8", "#### 7", "no hashes"], Grader(name=rf.name, reward=rf, threshold=1.0))
    assert [(x["correct"], x["score"]) for x in g] == [(1.0, 1.0), (0.0, 0.1), (0.0, 0.0)]
    low = grade([P] * 3, ["#### 8", "#### 7", "no hashes"], Grader(name=rf.name, reward=rf, threshold=0.1))
    assert [x["correct"] for x in low] == [1.0, 1.0, 0.0]


def test_grade_stops_when_the_user_grader_raises_on_every_completion():
    def broken(completions, **kwargs):
        raise ZeroDivisionError("oops")
    with pytest.raises(RewardFunctionError, match="'m:broken' raised on every completion"):
        grade([P] * 2, ["#### 8", "#### 7"],
              Grader(name="m:broken", reward=RewardFunction(name="m:broken", weight=1.0, fn=broken)))


def test_user_vote_reads_the_stated_answer_else_the_last_number():
    assert user_vote("so 3+5=8\n#### 8") == "8"
    assert user_vote("Answer: 12") == "12"
    assert user_vote("no number") is None


def test_problem_record_maj_at_k_under_a_user_grader_is_its_verdict_on_the_voted_answer():
    greedy = {"completion": "#### 8", "correct": 1.0, "lenient": 1.0}
    right = problem_record(P, greedy, ["#### 7", "#### 8", "x #### 8", "#### 7", "#### 8"], [0, 1, 1, 0, 1], 4, True)
    # the first 4 vote 7, 8, 8, 7: a tie goes to the first seen, 7, which the grader gave 0
    assert (right["voted"], right["maj_correct"], right["correct"]) == ("7", 0.0, 3)
    won = problem_record(P, greedy, ["#### 8", "#### 7", "then #### 8", "junk"], [1, 0, 1, 0], 4, True)
    assert (won["voted"], won["maj_correct"]) == ("8", 1.0)
    silent = problem_record(P, greedy, ["junk", "more junk"], [0, 0], 2, True)
    assert (silent["voted"], silent["maj_correct"]) == (None, 0.0)
