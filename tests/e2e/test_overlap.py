"""rollout.overlap=one_step_off as the user runs it: each batch is sampled from the weights one update
old, the lag metric says so, and a killed run resumes to the run left alone."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from tests.e2e.conftest import wait_until
from tests.conftest import read_jsonl

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
RUN = [ARITHMETIC, "--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=2",
       "--rollout.prompts_per_step=2", "--rollout.group_size=3", "--rollout.max_new_tokens=6",
       "--eval.max_new_tokens=6", "--train.steps=4", "--train.threads=1", "--train.samples_every=0",
       "--rewards.weights={'tests.e2e.test_overlap:varied_reward': 1.0}"]
OFF = "--rollout.overlap=one_step_off"


def varied_reward(completions, **kw):
    """Differs within every group on a random model, so every update moves the weights."""
    return [len(set(c)) / 10 for c in completions]


def completions(out: Path) -> dict[int, list[str]]:
    by_step = {}
    for rec in read_jsonl(out / "samples.jsonl"):
        by_step.setdefault(rec["step"], []).append(rec["completion"])
    return by_step


def run(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["train", *RUN, f"--train.out={out}", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def off_alone(tmp_path_factory):
    return run(tmp_path_factory.mktemp("off"), "run", OFF, "--optimizer.lr=1e-2")


def test_each_batch_is_sampled_from_the_weights_one_update_old(off_alone, tmp_path):
    sync = run(tmp_path, "sync", "--optimizer.lr=1e-2")
    frozen = run(tmp_path, "frozen", "--optimizer.lr=0")  # every step samples from the initial weights
    off, on, w0 = completions(off_alone), completions(sync), completions(frozen)
    assert off[1] == on[1] == w0[1]  # step 1: nothing to be late for
    assert off[2] == w0[2]  # sampled during update 1, from the initial weights ...
    assert on[2] != w0[2]  # ... where the synchronous run samples from the updated ones
    assert off[3] != w0[3]  # step 3 from the weights after update 1
    lags = [m["rollout/policy_lag"] for m in read_jsonl(off_alone / "metrics.jsonl")]
    assert lags == [0, 1, 1, 1]
    assert [m["rollout/policy_lag"] for m in read_jsonl(sync / "metrics.jsonl")] == [0, 0, 0, 0]


def test_the_sampler_correction_weighs_the_stale_batch(off_alone):
    metrics = read_jsonl(off_alone / "metrics.jsonl")
    # on by default (rollout.tis_cap 2.0): one update old, the sampler's log-probs differ from the trainer's
    assert metrics[0]["rollout/logp_mismatch_mean_abs"] < 1e-4
    assert all(m["rollout/logp_mismatch_mean_abs"] > 1e-4 for m in metrics[1:])


def untimed(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/")) and k != "train_seconds"}
            for r in rows]


@pytest.mark.parametrize("kill_after_lines", [2])
def test_killed_and_resumed_matches_the_run_left_alone(off_alone, tmp_path, kill_after_lines):
    """A checkpoint holds the batch already collected for the next step, so the resumed run trains on it."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr", "train", *RUN, OFF, "--optimizer.lr=1e-2", "--train.save_every=1",
           f"--train.out={out}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ckpt = out / "checkpoints"
    wait_until(lambda: ckpt.exists() and len(list(ckpt.glob("step_*.pt"))) >= kill_after_lines, proc,
               f"{kill_after_lines} checkpoints were written (the run must still be going to be killed)")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert main(["train", "--resume", str(out)]) == 0
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert untimed(read_jsonl(out / name)) == untimed(read_jsonl(off_alone / name)), name


def test_a_steps_metrics_read_the_prompt_sampler_as_its_own_batch_left_it(tmp_path, monkeypatch):
    """Step k's curriculum metrics are the sampler's once it observed step k's batch, whatever the collecting
    thread has done since: here each update waits until step k+1's batch (whose collection observes it too)
    is in, the ordering that made them step k+1's before."""
    from rlvr.tasks.curriculum import CurriculumSampler
    from rlvr.train.overlap import Rollouts

    seen, observe, updated = {}, CurriculumSampler.observe, Rollouts.updated

    def observe_and_record(self, indices, group_pass, step):
        observe(self, indices, group_pass, step)
        seen[step] = self.metrics()

    def updated_then_wait(self):
        updated(self)
        if self.pending is not None:
            self.pending.future.result()

    monkeypatch.setattr(CurriculumSampler, "observe", observe_and_record)
    monkeypatch.setattr(Rollouts, "updated", updated_then_wait)
    out = run(tmp_path, "run", OFF, "--optimizer.lr=1e-2")
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(seen) == 4 and seen[1] != seen[2]  # the pass rates moved from step to step
    for row in rows:
        assert {k: v for k, v in row.items() if k.startswith("curriculum/")} == seen[row["step"]], row["step"]


def test_one_step_off_is_seen_in_the_summary_and_the_report(off_alone):
    """summary.json's "overlap" is metrics.jsonl's one-step-off figures summed by hand; report.html says it in
    words and plots it; the console said it (the same line)."""
    from rlvr.report.console import overlap_line

    rows = read_jsonl(off_alone / "metrics.jsonl")
    o = json.loads((off_alone / "summary.json").read_text())["overlap"]
    assert o["steps"] == 4 and o["policy_lag_mean"] == 0.75  # lags 0, 1, 1, 1
    assert o["overlap_frac_mean"] == pytest.approx(sum(m["time/overlap_frac"] for m in rows) / 4)
    assert o["collect_s"] == pytest.approx(sum(m["time/collect_s"] for m in rows))
    assert o["rollout_wait_s"] == pytest.approx(sum(m["time/rollout_wait_s"] for m in rows))
    assert o["saved_s"] == pytest.approx(sum(max(m["time/collect_s"] - m["time/rollout_wait_s"], 0) for m in rows))
    page = (off_alone / "report.html").read_text()
    assert overlap_line(o).replace("'", "&#x27;") in page and "One step off" in page
