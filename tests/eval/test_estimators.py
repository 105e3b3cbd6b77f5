import pytest

from rlvr.eval.estimators import (majority_vote, pass_at_k, stated_answer, summarize, summarize_by_difficulty,
                               vote_key)


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),                 # c / n
    (5, 2, 2, 0.7),                 # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (10, 3, 4, 1 - 35 / 210),       # 1 - C(7,4)/C(10,4)
    (200, 1, 100, 0.5),             # C(199,100)/C(200,100) = 100/200; the binomials overflow floats
    (5, 0, 3, 0.0),
    (5, 4, 2, 1.0),                 # n - c = 1 < k: every pair holds a correct sample
    (4, 4, 4, 1.0),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("n, c, k", [(3, 1, 4), (3, 1, 0), (0, 0, 1), (3, 4, 1), (3, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@pytest.mark.parametrize("text, expected", [
    ("3 + 4 = 7\nAnswer: 7", "7"),
    ("Answer: 7\n\\boxed{7}", "7"),            # the same answer twice is one answer
    ("Answer: 7\nAnswer: 8", None),            # several different answers do not vote
    ("<think>Answer: 7", None),                # unclosed reasoning
    ("<think>maybe 8</think>Answer: 7", "7"),
    ("seven", None),
])
def test_stated_answer(text, expected):
    assert stated_answer(text) == expected


@pytest.mark.parametrize("answer, key", [
    ("1/2", "1/2"), ("0.5", "1/2"), ("\\frac{1}{2}", "1/2"), ("\\dfrac{1}{2}", "1/2"),
    ("1,000", "1000"), ("1000.", "1000"), ("x = -3", "-3"), ("50%", "50%"), ("50", "50"),
    ("\\sqrt {2}", "\\sqrt{2}"), ("$\\pi$", "\\pi"),
])
def test_vote_key(answer, key):
    assert vote_key(answer) == key


@pytest.mark.parametrize("answers, expected", [
    (["7", None, "8", "8"], "8"),
    (["0.5", "3", "1/2"], "0.5"),              # 0.5 and 1/2 vote together; first spelling is kept
    (["3", "1/2", "0.5", "3"], "3"),           # 2-2 tie: the answer seen first wins
    (["1/2", "3", "3", "0.5"], "1/2"),
    ([None, "4", None, None], "4"),            # abstentions do not outvote an answer
    ([None, None], None),
    ([], None),
])
def test_majority_vote(answers, expected):
    assert majority_vote(answers) == expected


def _rec(difficulty, greedy, samples, correct, maj):
    return {"difficulty": difficulty, "greedy_correct": greedy, "samples": samples, "correct": correct,
            "maj_correct": maj}


def test_summarize_by_difficulty_hand_values():
    records = [_rec("d2", 1.0, 5, 2, 1.0), _rec("d10", 0.0, 5, 0, 0.0), _rec("d2", 0.0, 5, 5, 1.0)]
    out = summarize_by_difficulty(records, 2)
    assert out["n"] == 3
    assert out["pass@1"] == pytest.approx(1 / 3, abs=1e-12)
    assert out["pass@2"] == pytest.approx((0.7 + 0.0 + 1.0) / 3, abs=1e-12)
    assert out["maj@2"] == pytest.approx(2 / 3, abs=1e-12)
    assert list(out["per_difficulty"]) == ["d2", "d10"]  # natural order, not "d10" < "d2"
    d2 = out["per_difficulty"]["d2"]
    assert (d2["n"], d2["pass@1"], d2["maj@2"]) == (2, 0.5, 1.0)
    assert d2["pass@2"] == pytest.approx(0.85, abs=1e-12)
    assert out["per_difficulty"]["d10"] == {"pass@1": 0.0, "pass@2": 0.0, "maj@2": 0.0, "n": 1}


def test_summarize_needs_records():
    with pytest.raises(ValueError):
        summarize([], 1)


def test_pass_at_1_is_greedy_also_when_k_is_1():
    """With k = 1 the sampled estimate shares the greedy pass@1's key and must not overwrite it."""
    records = [{"difficulty": "", "greedy_correct": 1.0, "samples": 1, "correct": 0, "maj_correct": 0.0},
               {"difficulty": "", "greedy_correct": 0.0, "samples": 1, "correct": 0, "maj_correct": 0.0}]
    assert summarize(records, 1)["pass@1"] == 0.5
    assert summarize(records, 1)["maj@1"] == 0.0
