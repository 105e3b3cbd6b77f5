"""Each health rule on synthetic metric streams: fires when it should, stays quiet when it should not."""
import pytest

from rlvr.config import build_config
from rlvr.eval.grader import choose_grader
from rlvr.envs.episode_metrics import first_error
from rlvr.report.health import (RULES, HealthMonitor, HealthStop, Noted, RewardNames, entropy_collapse, env_errors,
                                kl_blowup, length_trend,
                                no_learning_signal, no_transfer, non_finite, ratio_blowup, reward_errors, reward_hacking,
                                skill_regression, special_casing, tool_errors, tool_use_collapse, truncation)
from rlvr.rewards import rewards_of


def stream(**series):
    n = len(next(iter(series.values())))
    return [{"step": i + 1, **{k.replace("__", "/"): v[i] for k, v in series.items()}} for i in range(n)]


def test_no_learning_signal():
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 0.95, 1.0]), []).rule == "no_learning_signal"
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 0.5, 1.0]), []) is None
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 1.0]), []) is None  # too few steps


def test_no_learning_signal_says_when_the_reward_pays_every_output_the_same():
    # steps 1-3 of a real tiny-random run on configs/demo.yaml whose only reward pays 1 for any output
    # (--rewards.weights='{"ur:always_one": 1.0}'): the reward, not the problems' difficulty, is the cause
    always = stream(reward__mean=[1.0] * 3, reward__std=[0.0] * 3, frac_zero_std_groups=[1.0] * 3)
    f = no_learning_signal(always, [])
    assert "Every completion scored 1.00 for 3 steps" in f.message and "`rlvr audit CONFIG`" in f.message
    assert f.evidence == {"frac_zero_std_groups": [1.0] * 3, "reward/mean": [1.0] * 3}
    # the same run with --rollout.max_new_tokens=2 (its truncated_frac 1.0, 0.98, 1.0): nothing scored
    f = no_learning_signal(stream(reward__mean=[0.0] * 3, reward__std=[0.0] * 3, frac_zero_std_groups=[1.0] * 3), [])
    assert "scored 0 for 3 steps" in f.message and "completion/truncated_frac" in f.message
    # a real tiny-random run paid by completion length at --optimizer.lr=0.5: scores differed at steps 1-2,
    # then every completion scored 0.24 (all 24 tokens long) while entropy fell: the policy collapsed
    lr = stream(reward__mean=[0.2067, 0.1202, 0.24, 0.24, 0.24], reward__std=[0.062, 0.085, 0.0, 0.0, 0.0],
                frac_zero_std_groups=[0.0, 0.0, 1.0, 1.0, 1.0], entropy=[4.5807, 3.2418, 1.0829, 0.7966, 0.6401])
    f = no_learning_signal(lr, [])
    assert "although scores differed at step 2" in f.message and "(entropy 4.58 -> 0.64 nats per token)" in f.message
    assert "Lower optimizer.lr" in f.message and "rlvr audit" not in f.message
    # groups each uniform but differing from one another: the problems' difficulty, said as before
    f = no_learning_signal(stream(reward__mean=[0.5] * 3, reward__std=[0.5] * 3, frac_zero_std_groups=[1.0] * 3), [])
    assert "Every completion scored" not in f.message and "Make the problems easier or harder" in f.message


def test_truncation():
    f = truncation(stream(completion__truncated_frac=[0.1, 0.97, 0.9]), [])
    assert f.rule == "truncation" and "max_new_tokens" in f.message
    assert truncation(stream(completion__truncated_frac=[0.9, 0.2]), []) is None


def test_length_explosion_and_collapse():
    up = stream(completion__length_mean=[10, 11, 10, 12, 16, 18, 20, 22])
    assert length_trend(up, []).rule == "length_explosion"
    down = stream(completion__length_mean=[40, 38, 41, 39, 20, 18, 15, 12])
    assert length_trend(down, []).rule == "length_collapse"
    flat = stream(completion__length_mean=[10, 12, 11, 10, 12, 11, 13, 12])
    assert length_trend(flat, []) is None


def test_length_collapse_said_within_5_steps_of_a_real_run():
    # a real tiny-random run on configs/demo.yaml paid 1 - len/100 per completion (--optimizer.lr=0.01):
    # steps 1-5; halves of two steps (20.97 -> 10.66 tokens) before whole windows of four exist
    short = stream(completion__length_mean=[21.484, 20.453, 17.109, 12.094, 9.219])
    assert length_trend(short[:4], []) is None  # 20.97 -> 14.60: a factor 1.44, below 1.6
    f = length_trend(short, [])
    assert f.rule == "length_collapse" and f.step == 5 and "short or empty answers" in f.message
    assert f.evidence == pytest.approx({"first_window_mean": 20.9685, "last_window_mean": 10.6565})
    # the healthy demo (SmolLM2, configs/demo.yaml) at steps 1-5 and 1-11: its one-line answers shorten a little
    demo = stream(completion__length_mean=[6.188, 5.891, 5.594, 5.141, 5.453, 5.406, 5.25, 5.25, 5.062, 5.344, 5.141])
    assert [length_trend(demo[:n], []) for n in range(1, 12)] == [None] * 11
    assert length_trend(stream(completion__length_mean=[20, 5, 4]), []) is None  # three steps: too few


def test_reward_hacking_by_heldout_and_by_format():
    rising = stream(reward__mean=[0.1, 0.1, 0.2, 0.5, 0.6, 0.7])
    flat_acc = [{"step": 0, "heldout_accuracy": 0.4}, {"step": 6, "heldout_accuracy": 0.38}]
    assert reward_hacking(rising, flat_acc).rule == "suspected_reward_hacking"
    better = [{"step": 0, "heldout_accuracy": 0.4}, {"step": 6, "heldout_accuracy": 0.6}]
    assert reward_hacking(rising, better) is None
    form = stream(reward__mean=[0.1, 0.1, 0.1, 0.4, 0.4, 0.4], reward__format__mean=[0.1, 0.1, 0.1, 0.9, 0.9, 0.9],
                  reward__correctness__mean=[0.3, 0.3, 0.3, 0.3, 0.3, 0.3])
    assert "form, not the answers" in reward_hacking(form, []).message
    honest = stream(reward__mean=[0.1, 0.1, 0.1, 0.4, 0.4, 0.4], reward__format__mean=[0.1, 0.1, 0.1, 0.9, 0.9, 0.9],
                    reward__correctness__mean=[0.3, 0.3, 0.3, 0.6, 0.6, 0.6])
    assert reward_hacking(honest, []) is None
    # at the default weights (correctness 1.0, format 0.2) the format reward rising 0.4 -> 0.9 while correctness
    # stays at 0.1 moves reward/mean (0.1 + 0.2 x format) by 0.087 over the halves, below the total's `rise`: still
    # said, read from the format reward itself
    fmt = [0.4, 0.4, 0.5, 0.8, 0.9, 0.9]
    weighted = stream(reward__mean=[0.1 + 0.2 * x for x in fmt], reward__format__mean=fmt,
                      reward__correctness__mean=[0.1] * 6)
    f = reward_hacking(weighted, [])
    assert f.evidence == pytest.approx({"format_change": 0.4333333, "correctness_change": 0.0})


def my_grader(completions, answer, **kw):
    """A user's own correctness reward: 1 where the completion holds the gold answer."""
    return [float(a in c) for c, a in zip(completions, answer)]


def test_the_format_rule_reads_the_runs_own_correctness_reward():
    """A run graded by the user's reward (eval.grader) is judged by that reward's metric: the format
    reward rising while it stays flat fires the rule, and built-in names it does not have change nothing."""
    name = "tests.report.test_health:my_grader"
    cfg = build_config(None, ["--model.name=tiny-random", f"--rewards.weights={{{name}: 1.0, format: 0.2}}",
                              f"--eval.grader={name}"])
    rewards = rewards_of(cfg.rewards, cfg.rollout.max_new_tokens)
    names = RewardNames.of(rewards, choose_grader(rewards, cfg.eval.grader, cfg.eval.grader_threshold))
    assert names == RewardNames(strict=name, form="format")
    series = {"reward/mean": [0.1, 0.1, 0.1, 0.4, 0.4, 0.4], "reward/format/mean": [0.1, 0.1, 0.1, 0.9, 0.9, 0.9],
              f"reward/{name}/mean": [0.3, 0.3, 0.3, 0.3, 0.3, 0.3]}
    history = [{"step": i + 1, **{k: v[i] for k, v in series.items()}} for i in range(6)]
    found = HealthMonitor(names=names).check(history, [])
    assert [f.rule for f in found] == ["suspected_reward_hacking"]
    assert found[0].evidence["correctness_change"] == 0.0
    assert HealthMonitor().check(history, []) == []  # read as reward/correctness/mean: absent, no finding
    honest = [{**h, f"reward/{name}/mean": 0.3 if h["step"] <= 3 else 0.6} for h in history]
    assert HealthMonitor(names=names).check(honest, []) == []


def ev(step, acc, free, fixed=None, broken=None, n=100, split="heldout"):
    row = {"step": step, f"{split}_accuracy": acc, f"{split}_lenient": free}
    if broken is not None:
        row.update({f"{split}_fixed": fixed, f"{split}_broken": broken, f"{split}_kept": round(free * n) - fixed,
                    f"{split}_never": n - round(free * n) - broken})
    return row


def test_skill_regression_fires_on_the_old_demo():
    # configs/arithmetic.yaml's run: strict 41% -> 65%, format-free 79% -> 65%, 18 broken and 4 fixed of 100
    flat = stream(reward__mean=[0.5] * 6)
    f = skill_regression(flat, [ev(0, 0.41, 0.79), ev(20, 0.65, 0.65, fixed=4, broken=18)])
    assert f.rule == "skill_regression" and f.step == 20
    assert "79% to 65%" in f.message and "18 of 100" in f.message and "41% to 65%" in f.message
    assert f.evidence["broken"] == 18


def test_skill_regression_by_broken_alone_and_by_reward():
    # format-free even (70% -> 70%) but 6 of 100 broken: at the 5% threshold
    assert skill_regression([], [ev(0, 0.4, 0.7), ev(10, 0.6, 0.7, fixed=6, broken=6)]).rule == "skill_regression"
    # strict flat, but the reward rose while format-free fell 4 points: fires
    rising = stream(reward__mean=[0.1, 0.1, 0.2, 0.5, 0.6, 0.7])
    assert skill_regression(rising, [ev(0, 0.4, 0.70), ev(6, 0.4, 0.66)]) is not None
    # OOD regressing at the end is caught too
    rows = [ev(0, 0.1, 0.3, split="ood"), ev(20, 0.3, 0.2, fixed=1, broken=11, split="ood")]
    assert skill_regression([], rows).evidence["split"] == "ood"


def test_skill_regression_quiet_on_a_real_gain():
    assert skill_regression([], [ev(0, 0.41, 0.79), ev(20, 0.85, 0.88, fixed=11, broken=2)]) is None
    # below both thresholds: format-free down 2 points, 4 of 100 broken
    assert skill_regression([], [ev(0, 0.41, 0.79), ev(20, 0.70, 0.77, fixed=2, broken=4)]) is None
    # 5 broken but 60 fixed (the int8 demo run: format-free 16% -> 71%): a gain, not a regression
    assert skill_regression([], [ev(0, 0.16, 0.16), ev(20, 0.71, 0.71, fixed=60, broken=5)]) is None
    # skill down while strict and the reward fall too: a different problem (not form over skill)
    falling = stream(reward__mean=[0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    assert skill_regression(falling, [ev(0, 0.5, 0.8), ev(6, 0.4, 0.6, fixed=0, broken=20)]) is None
    assert skill_regression([], [ev(0, 0.41, 0.79)]) is None  # one evaluation: nothing to compare


def test_no_transfer_fires_when_only_held_out_rises():
    def both(step, held, ood):
        return {"step": step, "heldout_accuracy": held, "ood_accuracy": ood}

    mid = {"step": 10, "heldout_accuracy": 0.5}  # mid-run evaluations have no OOD split: skipped
    f = no_transfer([], [both(0, 0.16, 0.0), mid, both(20, 0.70, 0.01)])
    assert f.rule == "no_transfer" and f.step == 20
    assert "from 16% to 70% but OOD from 0% to 1%" in f.message and "task.params" in f.message
    assert f.evidence == {"heldout_accuracy": [0.16, 0.70], "ood_accuracy": [0.0, 0.01]}
    assert no_transfer([], [both(0, 0.5, 0.3), both(20, 0.8, 0.2)]).rule == "no_transfer"  # OOD fell
    # the demo's weakest OOD gain (0% -> 4%) transfers; held-out up 9 points is below the gain; OOD at 99%
    # has no room to rise; one evaluation has nothing to compare
    assert no_transfer([], [both(0, 0.16, 0.0), mid, both(20, 0.64, 0.04)]) is None
    assert no_transfer([], [both(0, 0.16, 0.0), both(20, 0.25, 0.0)]) is None
    assert no_transfer([], [both(0, 0.16, 0.99), both(20, 0.70, 0.99)]) is None
    assert no_transfer([], [both(0, 0.16, 0.0), mid]) is None


def test_instability_rules():
    assert kl_blowup(stream(kl=[0.1, 2.5]), []).rule == "kl_blowup"
    assert ratio_blowup(stream(ratio__max=[1.2, 40.0]), []).rule == "ratio_blowup"
    assert entropy_collapse(stream(entropy=[0.01, 0.005, 0.001]), []).rule == "entropy_collapse"
    calm = stream(kl=[0.1, 0.2], entropy=[0.5, 0.4])
    assert [rule(calm, []) for rule in (kl_blowup, ratio_blowup, entropy_collapse)] == [None] * 3


def test_a_kl_blowup_that_lasts_does_not_hide_the_entropy_collapse_after_it():
    # KL stays above 1 from step 2 while entropy falls below 0.02 from step 3: each finding at its own step
    # (one rule returning the first of the three kept saying kl_blowup, fired already, and hid the others)
    monitor, history = HealthMonitor(), []
    for row in stream(kl=[0.5, 1.5, 2.0, 3.0, 4.0], entropy=[0.3, 0.1, 0.01, 0.005, 0.001],
                      ratio__max=[1.5, 2.0, 3.0, 12.0, 4.0]):
        history.append(row)
        monitor.check(history, [])
    assert [(f.rule, f.step) for f in monitor.findings] == [("kl_blowup", 2), ("ratio_blowup", 4),
                                                            ("entropy_collapse", 5)]


def test_non_finite_and_reward_errors():
    assert non_finite(stream(skipped_updates=[0, 1]), []).rule == "non_finite"
    assert non_finite(stream(skipped_updates=[0, 0], loss=[0.1, 0.2]), []) is None
    s = stream(completions=[16], reward__mine__errors=[4])
    assert "'mine'" in reward_errors(s, []).message
    assert reward_errors(stream(completions=[100], reward__mine__errors=[1]), []) is None


def test_monitor_fires_each_rule_once():
    m = HealthMonitor()
    history = []
    fired = []
    for i in range(5):
        history.append({"step": i + 1, "frac_zero_std_groups": 1.0})
        fired += m.check(history, [])
    assert [f.rule for f in fired] == ["no_learning_signal"] and fired[0].step == 3


def test_special_casing_fires_when_visible_only_passes_rise():
    rows = lambda vals: [{"step": i + 1, "code/visible_only_frac": v} for i, v in enumerate(vals)]
    # first window mean 0.1, last 0.3: rose by 0.2 and above the 0.2 floor
    f = special_casing(rows([0.1, 0.1, 0.1, 0.3, 0.3, 0.3]), [])
    assert f is not None and f.rule == "test_special_casing" and f.step == 6
    assert f.evidence == pytest.approx({"first_window_mean": 0.1, "last_window_mean": 0.3})
    assert special_casing(rows([0.1, 0.1, 0.1, 0.15, 0.15, 0.15]), []) is None  # rose 0.05 only
    assert special_casing(rows([0.0, 0.0, 0.0, 0.15, 0.15, 0.15]), []) is None  # below the floor
    assert special_casing(rows([0.1, 0.1, 0.3, 0.3, 0.3]), []) is None  # too few steps
    assert special_casing([{"step": 1, "reward/mean": 0.5}] * 8, []) is None  # not a code run


def test_tool_use_collapse_fires_when_tool_use_dies_and_reward_is_flat():
    # first window mean (0.25 + 0.125 + 0.25) / 3 = 0.2083 >= 0.2; last three all <= 0.02 (0.02 itself counts);
    # reward change 0.3333 - 0.2917 = 0.0417 < 0.05
    s = stream(env__tool_use_frac=[0.25, 0.125, 0.25, 0.0, 0.02, 0.0],
               reward__mean=[0.25, 0.25, 0.375, 0.25, 0.375, 0.375])
    f = tool_use_collapse(s, [])
    assert f.rule == "tool_use_collapse" and f.step == 6 and "stopped calling the tools" in f.message
    assert f.evidence["last_window_tool_use"] == [0.0, 0.02, 0.0]
    assert (f.evidence["first_window_tool_use"], f.evidence["reward_change"]) == pytest.approx((0.625 / 3, 0.125 / 3))
    assert "21% of episodes" in f.message and "+0.04" in f.message


def test_tool_use_collapse_quiet_at_the_boundaries():
    flat = [0.25] * 6
    assert tool_use_collapse(stream(env__tool_use_frac=[0.125, 0.125, 0.25, 0, 0, 0], reward__mean=flat), []) is None
    assert tool_use_collapse(stream(env__tool_use_frac=[0.25, 0.25, 0.25, 0, 0.03, 0], reward__mean=flat), []) is None
    # the reward rose by (0.125 + 0.125) / 3 = 0.083 >= 0.05: the tool may no longer be needed
    risen = [0.25, 0.25, 0.25, 0.25, 0.375, 0.375]
    assert tool_use_collapse(stream(env__tool_use_frac=[0.25, 0.25, 0.25, 0, 0, 0], reward__mean=risen), []) is None
    assert tool_use_collapse(stream(env__tool_use_frac=[0.25, 0.25, 0, 0, 0], reward__mean=flat[:5]), []) is None
    assert tool_use_collapse(stream(reward__mean=flat), []) is None  # no env keys: a single-turn run


def test_tool_errors_fires_on_a_high_failure_rate():
    # calls in the last three steps: 16 * (1.0 + 0.5 + 0.25) = 28 >= 10; every rate >= 0.5 (0.5 itself counts)
    s = stream(completions=[16] * 4, env__tool_calls_mean=[1.0, 1.0, 0.5, 0.25],
               env__tool_errors_frac=[0.1, 0.75, 0.5, 1.0])
    f = tool_errors(s, [])
    assert f.rule == "tool_errors" and f.step == 4 and "75% of tool calls failed" in f.message
    assert "(28 calls)" in f.message and f.evidence == {"env/tool_errors_frac": [0.75, 0.5, 1.0], "calls": 28.0}
    # without completions logged the rate alone decides
    f = tool_errors(stream(env__tool_errors_frac=[0.5, 0.5, 0.5]), [])
    assert f is not None and f.evidence["calls"] is None


def test_tool_errors_quiet_at_the_boundaries():
    assert tool_errors(stream(env__tool_errors_frac=[0.75, 0.49, 1.0]), []) is None  # one step under 0.5
    # 3 completions x (1 + 1 + 1) = 9 calls < 10: too few to judge
    few = stream(completions=[3] * 3, env__tool_calls_mean=[1.0] * 3, env__tool_errors_frac=[1.0] * 3)
    assert tool_errors(few, []) is None
    assert tool_errors(stream(env__tool_errors_frac=[1.0, 1.0]), []) is None  # too few steps
    assert tool_errors(stream(completions=[16] * 3, reward__mean=[0.1] * 3), []) is None  # no env keys


def test_tool_rules_are_in_the_monitor():
    assert tool_use_collapse in RULES and tool_errors in RULES and env_errors in RULES


BROKEN = "Broken.step raised IndexError: list index out of range (/work/envs.py, line 9, in step)"


def test_env_errors_says_a_rate_that_ends_most_episodes_with_the_first_error():
    f = env_errors(stream(env__end__env_error_frac=[0.0, 0.25, 0.75]), [], Noted(env_error=BROKEN))
    assert (f.rule, f.step, f.stop, f.evidence) == ("env_errors", 3, False, {"env/end/env_error_frac": 0.75})
    assert f.message.startswith("75% of the episodes of step 3 ended with an environment error")
    assert f"The first: {BROKEN}. Make the environment's step answer" in f.message
    # every episode of a later step is said, not stopped: the run's first steps ran
    assert env_errors(stream(env__end__env_error_frac=[0.0, 1.0]), [], Noted(env_error=BROKEN)).stop is False
    assert "The first" not in env_errors(stream(env__end__env_error_frac=[0.6]), []).message  # no text noted


def test_env_errors_quiet_at_half_or_less_and_without_episodes():
    assert env_errors(stream(env__end__env_error_frac=[0.5]), [], Noted(env_error=BROKEN)) is None   # half is not most
    assert env_errors(stream(env__end__env_error_frac=[1.0, 0.5]), []) is None   # the last step decides
    assert env_errors(stream(reward__mean=[0.1, 0.2]), []) is None   # single-turn: no env keys


def test_every_episode_of_the_first_step_failing_stops_the_run(tmp_path):
    """The finding is written to health.jsonl with "stop": true and raised (HealthStop), not said; the rule's
    text is the run's first environment error, noted from the episodes' records."""
    from rlvr.report.sinks import JsonlWriter
    from tests.conftest import read_jsonl

    monitor = HealthMonitor()
    monitor.note(first_error([{"end": "done"}, {"end": "env_error", "error": BROKEN}, {"end": "env_error", "error": "2"}]))
    monitor.note(first_error([{"end": "done"}]))
    monitor.note("the next step's")
    assert monitor.noted == Noted(env_error=BROKEN)
    with JsonlWriter(tmp_path / "health.jsonl") as sink, pytest.raises(HealthStop) as stop:
        monitor.report(stream(env__end__env_error_frac=[1.0]), [], sink)
    assert str(stop.value) == (
        "health [env_errors] at step 1: every episode of step 1 ended with an environment error "
        "(env/end/env_error_frac 1.0), so the run stops: nothing would be learned. The first: "
        f"{BROKEN}. Make the environment's step answer any text the model writes with a Reply (a turn it cannot "
        "read too); samples.jsonl holds each episode's error.")
    (record,) = read_jsonl(tmp_path / "health.jsonl")
    assert record["rule"] == "env_errors" and record["stop"] is True and record["step"] == 1


def test_the_healthy_demo_run_fires_nothing():
    """configs/demo.yaml as `make demo` runs it (SmolLM2-135M-Instruct, 20 steps on this CPU): held-out 16% -> 72%,
    OOD 0% -> 11%. Its real metrics, step by step with each evaluation as it came; the rules' nearest margins:
    groups with equal rewards 1.0, 0.875, 0.875 at steps 12-14 (no_learning_signal needs 0.9 in each of 3 steps)
    and entropy 0.043, 0.024, 0.041 at steps 18-20 (entropy_collapse needs each below 0.02)."""
    series = {
        "reward/mean": [0.228, 0.284, 0.431, 0.638, 1.044, 0.716, 0.684, 0.934, 0.794, 0.822, 0.731, 0.825, 1.059,
                        1.041, 0.791, 0.544, 0.959, 0.934, 1.059, 0.794],
        "reward/std": [0.225, 0.3, 0.429, 0.5, 0.366, 0.504, 0.504, 0.445, 0.495, 0.493, 0.503, 0.488, 0.35, 0.365,
                       0.499, 0.479, 0.44, 0.445, 0.35, 0.495],
        "frac_zero_std_groups": [0.375, 0.5, 0.5, 0.625, 0.5, 0.625, 0.5, 0.625, 0.875, 0.625, 0.75, 1.0, 0.875, 0.875,
                                 0.875, 0.875, 0.75, 0.875, 0.875, 0.875],
        "completion/length_mean": [6.188, 5.891, 5.594, 5.141, 5.453, 5.406, 5.25, 5.25, 5.062, 5.344, 5.141, 5.125,
                                   5.234, 5.547, 5.359, 5.125, 5.625, 5.375, 5.125, 5.125],
        "completion/truncated_frac": [0.0, 0.031, 0.016] + [0.0] * 10 + [0.016] + [0.0] * 6,
        "entropy": [1.044, 0.918, 0.756, 0.28, 0.158, 0.232, 0.196, 0.113, 0.185, 0.225, 0.101, 0.058, 0.017, 0.185,
                    0.073, 0.138, 0.238, 0.043, 0.024, 0.041],
        "reward/format/mean": [0.906, 0.953, 0.984, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.984, 1.0, 1.0, 1.0, 0.984, 0.984,
                               1.0, 0.969, 1.0, 1.0, 1.0],
        "reward/correctness/mean": [0.047, 0.094, 0.234, 0.438, 0.844, 0.516, 0.484, 0.734, 0.594, 0.625, 0.531, 0.625,
                                    0.859, 0.844, 0.594, 0.344, 0.766, 0.734, 0.859, 0.594],
        "ratio/max": [1.0] * 20, "kl": [None] * 20, "skipped_updates": [0] * 20, "completions": [64] * 20}
    history = [{"step": i + 1, **{k: v[i] for k, v in series.items()}} for i in range(20)]
    evals = {0: {"step": 0, "heldout_accuracy": 0.16, "heldout_lenient": 0.16, "ood_accuracy": 0.0, "ood_lenient": 0.0},
             10: {"step": 10, "heldout_accuracy": 0.71, "heldout_lenient": 0.71, "heldout_fixed": 58,
                  "heldout_broken": 3, "heldout_kept": 13, "heldout_never": 26},
             20: {"step": 20, "heldout_accuracy": 0.72, "heldout_lenient": 0.72, "heldout_fixed": 60,
                  "heldout_broken": 4, "heldout_kept": 12, "heldout_never": 24, "ood_accuracy": 0.11,
                  "ood_lenient": 0.11, "ood_fixed": 11, "ood_broken": 0, "ood_kept": 0, "ood_never": 89}}
    monitor = HealthMonitor()
    for n in range(1, 21):
        assert monitor.check(history[:n], [e for s, e in evals.items() if s <= n]) == [], n
