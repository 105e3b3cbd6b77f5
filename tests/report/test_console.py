from rlvr.report.console import before_after_table, format_samples, verdict_text
from rlvr.report.html import _sample_html


def test_verdict_text_leaves_out_an_empty_reason():
    assert verdict_text("m:my_reward", {"score": 1.0, "reason": ""}, "=") == "m:my_reward=1"
    assert verdict_text("correctness", {"score": 0.0, "reason": "no final answer"}, " = ") \
        == "correctness = 0 (no final answer)"


def test_samples_and_report_show_no_empty_brackets_for_a_bare_number():
    sample = {"step": 1, "reward": 1.0, "prompt": "Q", "completion": "#### 8",
              "rewards": {"m:my_reward": {"score": 1.0, "reason": ""}, "format": {"score": 0.0, "reason": "no tag"}}}
    assert format_samples(1, [sample], group_size=1).splitlines()[-1] == "   m:my_reward=1, format=0 (no tag)"
    assert "m:my_reward = 1; format = 0 (no tag)" in _sample_html(sample) and "()" not in _sample_html(sample)


def test_before_after_table_names_a_user_grader():
    summary = {"grader": "verl:s.py:compute_score", "heldout_accuracy_before": 0.25, "heldout_accuracy_after": 0.5}
    lines = before_after_table(summary).splitlines()
    assert lines[0] == "accuracy = graded by your reward 'verl:s.py:compute_score'"
    assert lines[2].split() == ["held-out", "accuracy", "25.0%", "50.0%", "+25.0"]
    assert "graded by" not in before_after_table({"grader": "builtin", "heldout_accuracy_before": 0.25})
