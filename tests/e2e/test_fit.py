"""rlvr.fit: TRL's habits (callables, rows in memory, keywords) run the same run as rlvr train; config.yaml
names the callables and the saved rows, and a resume says what to pass again."""
import json

import pytest
import yaml

import rlvr
from rlvr.checkpoint_files import checkpoint_path
from rlvr.cli import main
from rlvr.errors import RlvrError

ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "source": f"mine-{i}"} for i in range(15)]
SMALL = dict(train__steps=2, train__save_every=1, train__samples_every=0, rollout__prompts_per_step=2,
             rollout__group_size=2, rollout__max_new_tokens=4, eval__max_new_tokens=4, task__ood_size=0)
SEEN = []


def exact(completions, answer, source, **kwargs):
    SEEN.extend(source)  # every column reaches the reward, as in TRL
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(ground_truth in solution_str)


def test_fit_trains_on_rows_in_memory_with_python_rewards_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    summary = rlvr.fit(model="tiny-random", rewards={exact: 1.0, compute_score: 0.5}, train_dataset=ROWS,
                       train__out=str(out), **SMALL)
    assert summary["steps"] == 2 and json.loads((out / "summary.json").read_text())["steps"] == 2
    assert set(SEEN) <= {r["source"] for r in ROWS} and SEEN
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["rewards"]["weights"] == {"python:exact": 1.0, "verl:python:compute_score": 0.5}
    assert saved["task"]["name"] == str(out / "data" / "train.jsonl")
    assert [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()] == ROWS
    assert saved["task"]["heldout_size"] is None  # 15 rows: a fifth held out
    assert len((out / "eval_before.jsonl").read_text().splitlines()) == 3  # held-out: a fifth of 15 rows
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {"reward/python:exact/mean", "reward/verl:python:compute_score/mean"} <= set(metrics[0])

    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=3"]) == 2  # the callables are not in the file
    assert ("reward 'python:exact' is a Python function given to rlvr.fit, which config.yaml cannot hold: pass it "
            "again, e.g. rlvr.fit(resume=RUN_DIR, rewards={exact: 1.0, ...})") in capsys.readouterr().err
    with pytest.raises(RlvrError) as taken:  # a fresh run into it again: refused in rlvr.fit's own words
        rlvr.fit(model="tiny-random", rewards=[exact], train_dataset=ROWS, train__out=str(out), **SMALL)
    assert str(taken.value).endswith(f"and nothing in it was changed: continue it with rlvr.fit(resume='{out}', "
                                     "rewards=...), choose another directory with train__out=DIR or replace it "
                                     "with train__overwrite=True")
    def exact_match(completions, answer, **kw):   # `exact` renamed since: matched by name, so refused
        return exact(completions, answer, **kw)
    with pytest.raises(RlvrError) as renamed:
        rlvr.fit(resume=out, rewards={exact_match: 1.0, compute_score: 0.5}, train__steps=3)
    assert str(renamed.value) == (
        "rlvr.fit(resume=...): the run's Python rewards are python:exact, verl:python:compute_score (config.yaml "
        "names each by its function's __name__), and this call gives python:exact_match, verl:python:compute_score; "
        "pass the same functions under the same names (the run's weights are kept)")
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    again = rlvr.fit(resume=out, rewards={exact: 1.0, compute_score: 0.5}, train__steps=3)
    assert again["steps"] == 3
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_fit_takes_a_datasets_dataset_and_a_failed_start_writes_nothing(tmp_path):
    from datasets import Dataset

    out = tmp_path / "run"
    with pytest.raises(RlvrError, match=r"train_dataset row 1: no column 'prompt' for prompt; the row has columns "
                                        r"question, answer"):
        rlvr.fit(model="tiny-random", rewards=[exact], train_dataset=[{"question": "Q", "answer": "1"}] * 5,
                 train__out=str(out), **SMALL)
    assert not out.exists()
    summary = rlvr.fit(model="tiny-random", rewards=["correctness"], train_dataset=Dataset.from_list(ROWS),
                       eval_dataset=ROWS[:4], train__out=str(out), **{**SMALL, "train.steps": 1})
    assert summary["steps"] == 1
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["task"]["heldout_file"] == str(out / "data" / "heldout.jsonl")
    assert len((out / "data" / "heldout.jsonl").read_text().splitlines()) == 4


class Watch:
    """TRL's habit: log a metric of your own, and stop the run when a condition holds."""

    def __init__(self, stop_at):
        self.stop_at, self.steps = stop_at, []

    def on_step_end(self, step, metrics, control):
        self.steps.append(step)
        control.should_training_stop = step == self.stop_at
        return {"custom/reward_x10": 10 * metrics["reward/mean"], "custom/step_squared": step * step}


def test_a_callback_logs_its_metrics_each_step_and_ends_the_run(tmp_path, capsys):
    out, watch = tmp_path / "run", Watch(stop_at=2)
    summary = rlvr.fit(model="tiny-random", rewards=[exact], train_dataset=ROWS, train__out=str(out),
                       callbacks=[watch], **{**SMALL, "train__steps": 4, "train__save_every": 100})
    assert watch.steps == [1, 2]  # called after each step; the stop ends the run after step 2 of 4
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["custom/step_squared"]) for r in rows] == [(1, 1), (2, 4)]
    assert all(r["custom/reward_x10"] == pytest.approx(10 * r["reward/mean"]) for r in rows)
    assert summary["steps"] == 2 and summary["stopped_by"] == "Watch" and "interrupted" not in summary
    assert (out / "final").is_dir() and checkpoint_path(out, 2).is_file()  # ended as a finished run
    assert "step 2 of 4: Watch.on_step_end set control.should_training_stop; the run ends here" in capsys.readouterr().err
    page = (out / "report.html").read_text()  # custom/ metrics plotted, one line each
    assert "Your metrics (custom/)" in page and "reward_x10" in page and "step_squared" in page
