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


def test_the_console_line_and_the_summary_say_one_step_off():
    """rollout.overlap=one_step_off: the progress line shows the batch's lag and the overlap; the closing
    line says the mean lag, the mean overlap and the collection time hidden, from summary.json's figures."""
    from rlvr.report.console import live_postfix, overlap_line
    from rlvr.train.overlap import overlap_summary

    row = {"reward/mean": 0.5, "completion/length_mean": 4.0, "rollout/policy_lag": 1, "time/overlap_frac": 0.8}
    assert live_postfix(row, []) == {"reward": "0.500", "len": "4.0", "lag": "1", "overlap": "80%"}
    assert "lag" not in live_postfix({"reward/mean": 0.5, "completion/length_mean": 4.0, "rollout/policy_lag": 0}, [])
    rows = [{"rollout/policy_lag": 0, "time/overlap_frac": 0.0, "time/collect_s": 2.0, "time/rollout_wait_s": 2.5},
            {"rollout/policy_lag": 1, "time/overlap_frac": 0.75, "time/collect_s": 4.0, "time/rollout_wait_s": 1.0}]
    o = overlap_summary(rows)
    assert o == {"steps": 2, "policy_lag_mean": 0.5, "overlap_frac_mean": 0.375, "collect_s": 6.0,
                 "rollout_wait_s": 3.5, "saved_s": 3.0}  # step 1 hid nothing (waited longer than it took)
    assert overlap_line(o) == ("one step off: each batch sampled 0.50 updates behind the policy it trained "
                               "(rollout/policy_lag, mean of 2 steps); collection overlapped the update 38% on "
                               "average (time/overlap_frac); 3.0 s of 6.0 s of collection hidden behind updates "
                               "(50%), 3.5 s waited")
    assert overlap_summary([{"rollout/policy_lag": 0}]) is None  # a synchronous run: nothing to say
