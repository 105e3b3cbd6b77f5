"""Whole runs that go wrong in the two commonest ways, and the report that shows it."""
import json

from rlvr.cli import main

from tests.e2e.conftest import copy_run
from tests.e2e.test_tiny_run import SMOKE


def findings(out):
    return [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]


def test_unsolvable_task_fires_no_learning_signal_within_5_steps(tmp_path):
    # a random model never states a correct answer: every group's rewards are equal
    out = tmp_path / "nosignal"
    assert main(["train", *SMOKE, f"--train.out={out}", "--train.steps=5", "--rewards.weights={correctness: 1.0}"]) == 0
    (f,) = [f for f in findings(out) if f["rule"] == "no_learning_signal"]
    assert f["step"] <= 5 and f["evidence"]["frac_zero_std_groups"] == [1.0, 1.0, 1.0]
    assert "no_learning_signal" in json.loads((out / "summary.json").read_text())["health"]
    page = (out / "report.html").read_text()
    assert "no_learning_signal" in page and page.count("<svg") == 6
    assert "zero-variance groups" in page


def test_tiny_max_new_tokens_fires_truncation(tmp_path, capsys):
    """`rlvr train ... 2> log`: the finding is said on a line of its own, never after the progress bar's text
    (a log is not a terminal: the bar is written as whole lines)."""
    out = tmp_path / "trunc"
    assert main(["train", *SMOKE, f"--train.out={out}", "--train.steps=3", "--rollout.max_new_tokens=2"]) == 0
    assert "truncation" in {f["rule"] for f in findings(out)}
    log = capsys.readouterr().err
    assert "\r" not in log.split("eval at step 0")[1].split("eval at step 3")[0]
    lines = log.splitlines()
    assert any(line.startswith("health [truncation] at step ") for line in lines)
    assert [line.split(" [")[0] for line in lines if line.startswith("train ")] == ["train 1/3", "train 3/3"]
    assert "truncation" in (out / "report.html").read_text()


def test_report_command(trained, tmp_path, capsys):
    out = copy_run(trained(*SMOKE), tmp_path / "r")  # test_tiny_run's smoke run
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_tensorboard_tracker_and_missing_tracker(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    assert main(["train", *SMOKE, f"--train.out={out}", "--log.trackers=[tensorboard]", "--train.steps=4",
                 "--train.eval_every=2"]) == 0
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("reward/mean")] == [1, 2, 3, 4]
    # every evaluation reaches the tracker as evals.jsonl has it: before (0), mid-run (2), at the end (4)
    evals = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    for key, steps in (("heldout_accuracy", [0, 2, 4]), ("heldout_lenient", [0, 2, 4]), ("heldout_format", [0, 2, 4]),
                       ("ood_accuracy", [0, 4]), ("ood_lenient", [0, 4]), ("heldout_fixed", [2, 4]),
                       ("heldout_broken", [2, 4]), ("ood_never", [4])):
        got = [(e.step, e.value) for e in acc.Scalars(f"eval/{key}")]
        assert got == [(r["step"], r[key]) for r in evals if key in r] and [s for s, _ in got] == steps, key
    assert "eval/train_seconds" not in acc.Tags()["scalars"]
    assert main(["train", *SMOKE, f"--train.out={out}", "--log.trackers=[tensorbored]"]) == 2
    assert "unknown tracker in log.trackers ['tensorbored']: each one of tensorboard, wandb, trackio" in \
        capsys.readouterr().err


def test_absent_tracker_package_is_a_clear_error(tmp_path, capsys):
    import importlib.util

    import pytest
    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    assert main(["train", *SMOKE, f"--train.out={tmp_path}", "--log.trackers=[wandb]"]) == 2
    assert "pip install 'rlvr[wandb]'" in capsys.readouterr().err
