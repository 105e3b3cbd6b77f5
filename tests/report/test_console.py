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


def test_line_progress_writes_whole_lines_first_last_and_every_interval(capsys, monkeypatch):
    from rlvr.report import console

    clock = iter([0.0, 1.0, 2.0, 30.0, 31.0, 32.0])
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    bar = console.progress(4)            # stderr is captured here, not a terminal
    assert isinstance(bar, console.LineProgress)
    for step in range(1, 5):
        bar.set_postfix({"reward": f"{step / 4:.3f}"})
        bar.update(1)
    # t = 1 (first step), 2 (under 10 s since: quiet), 30 (28 s since), 31 (the last)
    assert capsys.readouterr().err.splitlines() == [
        "train 1/4 [0:00:01 elapsed, 0:00:03 left] reward=0.250",
        "train 3/4 [0:00:30 elapsed, 0:00:10 left] reward=0.750",
        "train 4/4 [0:00:31 elapsed, 0:00:00 left] reward=1.000"]
