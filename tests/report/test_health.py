"""Each health rule on synthetic metric streams: fires when it should, stays quiet when it should not."""
from rlvr.report.health import (HealthMonitor, instability, length_trend, no_learning_signal, non_finite,
                                reward_errors, reward_hacking, truncation)


def stream(**series):
    n = len(next(iter(series.values())))
    return [{"step": i + 1, **{k.replace("__", "/"): v[i] for k, v in series.items()}} for i in range(n)]


def test_no_learning_signal():
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 0.95, 1.0]), []).rule == "no_learning_signal"
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 0.5, 1.0]), []) is None
    assert no_learning_signal(stream(frac_zero_std_groups=[1.0, 1.0]), []) is None  # too few steps


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


def test_instability_rules():
    assert instability(stream(kl=[0.1, 2.5]), []).rule == "kl_blowup"
    assert instability(stream(ratio__max=[1.2, 40.0]), []).rule == "ratio_blowup"
    assert instability(stream(entropy=[0.01, 0.005, 0.001]), []).rule == "entropy_collapse"
    assert instability(stream(kl=[0.1, 0.2], entropy=[0.5, 0.4]), []) is None


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
