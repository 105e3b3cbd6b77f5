"""Flips and the decomposition of the strict change on a hand-made pair of evaluations."""
from rlvr.eval.flips import decompose, describe, flips


def rec(q, correct, lenient, completion=""):
    return {"question": q, "answer": "0", "completion": completion or q, "correct": correct, "lenient": lenient}


# 10 problems. before: strict right on 1-2, right but not in form on 3-6, wrong on 7-10.
BEFORE = [rec(f"q{i}", 1.0 if i <= 2 else 0.0, 1.0 if i <= 6 else 0.0, f"b{i}") for i in range(1, 11)]
# after: in form everywhere it is right; q2 and q5 broken, q7 fixed; q1, q3, q4, q6 kept.
AFTER_RIGHT = {1, 3, 4, 6, 7}
AFTER = [rec(f"q{i}", 1.0 if i in AFTER_RIGHT else 0.0, 1.0 if i in AFTER_RIGHT else 0.0, f"a{i}")
         for i in range(1, 11)]


def test_flip_counts_and_examples():
    f = flips(BEFORE, AFTER, examples=1)
    assert {k: f[k] for k in ("fixed", "broken", "kept", "never", "n")} == \
        {"fixed": 1, "broken": 2, "kept": 4, "never": 3, "n": 10}
    assert f["examples"]["broken"] == [{"question": "q2", "answer": "0", "before": "b2", "after": "a2"}]
    assert [e["question"] for e in f["examples"]["fixed"]] == ["q7"]


def test_flips_match_by_question_and_skip_unmatched():
    f = flips(BEFORE, list(reversed(AFTER))[:4] + [rec("extra", 1.0, 1.0)])  # q10, q9, q8, q7 and one unknown
    assert (f["n"], f["fixed"], f["never"]) == (4, 1, 3)


def test_decomposition_hand_values():
    # strict 20% -> 50% (+30); format-free 60% -> 50% (-10); right-but-not-in-form 40% -> 0% (+40)
    d = decompose(BEFORE, AFTER)
    assert d["n"] == 10 and (d["fixed"], d["broken"]) == (1, 2)
    assert abs(d["strict"] - 30.0) < 1e-9 and abs(d["answers"] + 10.0) < 1e-9 and abs(d["form"] - 40.0) < 1e-9
    assert describe(d) == ("+30.0 points strict: +40.0 from right answers now in the required form, "
                           "-10.0 from the answers themselves (1 fixed, 2 broken of 10)")


def test_no_common_problems():
    d = decompose(BEFORE, [rec("other", 1.0, 1.0)])
    assert d["n"] == 0 and describe(d) == "no problems in common"
