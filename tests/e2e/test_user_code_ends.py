"""User code that would end or hold the trainer's process, as a user meets it: `rlvr train` in a real
process with a reward file that calls os._exit(0), or hangs, and a real SIGTERM / SIGINT. What is asserted
is what happened (exit status, checkpoint, summary, the line said); the waits have backstops that fail with
a message, never a wall-clock assertion."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.checkpoint_files import checkpoint_path, latest_checkpoint
from tests.e2e.conftest import finished, wait_until

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
QUICK = ["--eval.before=false", "--eval.after=false", "--task.heldout_size=2", "--task.ood_size=0",
         "--train.samples_every=0"]


def rlvr_train(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "rlvr", "train", SMOKE, *QUICK, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_a_reward_calling_os_exit_never_reads_as_success(tmp_path):
    """os._exit(0) in a reward without rewards.isolate: the call fails as sys.exit() would (a reward that
    fails on every row stops the run, exit 2, naming where os._exit was called); never exit 0 with no summary."""
    reward = tmp_path / "quits.py"
    reward.write_text("import os\n\ndef quit_early(completions, **kw):\n    os._exit(0)\n")
    code, err = finished(rlvr_train(f"--train.out={tmp_path / 'run'}", "--train.steps=2",
                                    f"--rewards.weights={{'{reward}:quit_early': 1.0}}"), 300, "rlvr train")
    assert code == 2, err[-3000:]
    assert f"os._exit(0) called at {reward}:4 during the run" in err
    assert not (tmp_path / "run" / "summary.json").exists()


HANGS = """
import pathlib
import time

def hangs_at_step_3(completions, trainer_state, **kw):
    if trainer_state.global_step >= 2:  # steps 1 and 2 are scored; step 3's call never returns
        pathlib.Path(__file__).with_name("hanging").touch()
        time.sleep(3600)
    return [float(c.strip().isdigit()) for c in completions]
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_run_blocked_in_a_reward_and_keeps_the_steps_done(tmp_path, sig):
    """A reward that hangs at step 3 under the default rewards.timeout_s (300 s): SIGTERM or SIGINT stops the
    run now, not at the limit. The two steps done are checkpointed (train.save_every=100: no checkpoint was
    due), the summary says the signal, and the run resumes from step 2."""
    reward, out = tmp_path / "hangs.py", tmp_path / "run"
    reward.write_text(HANGS)
    proc = rlvr_train(f"--train.out={out}", "--train.steps=5", "--train.save_every=100",
                      f"--rewards.weights={{'{reward}:hangs_at_step_3': 1.0}}")
    wait_until((tmp_path / "hanging").exists, proc, "the reward hung at step 3")
    proc.send_signal(sig)
    code, err = finished(proc, 120, f"a run blocked in a reward, sent {sig.name}")
    assert code == 0, err[-3000:]
    assert (f"{sig.name}: stopping now: this step waits on user code (a reward call that has not returned), so it "
            "is dropped; the steps done are checkpointed") in err
    assert f"stopped at step 2 by {sig.name}; continue with: rlvr train --resume {out}" in err
    assert latest_checkpoint(out) == checkpoint_path(out, 2)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["steps"], summary["interrupted"]) == (2, sig.name)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_signal_during_the_rewards_first_try_stops_the_start_in_one_line(tmp_path):
    """The rewards are tried on real rows before training: one that hangs there, then SIGTERM, stops the start
    in one line (exit 2), with nothing written."""
    reward, out = tmp_path / "hangs.py", tmp_path / "run"
    reward.write_text(HANGS.replace("trainer_state.global_step >= 2", "True"))
    proc = rlvr_train(f"--train.out={out}", "--train.steps=2",
                      f"--rewards.weights={{'{reward}:hangs_at_step_3': 1.0}}")
    wait_until((tmp_path / "hanging").exists, proc, "the reward hung in its first try")
    proc.send_signal(signal.SIGTERM)
    code, err = finished(proc, 120, "a start blocked in a reward's first try, sent SIGTERM")
    assert code == 2, err[-3000:]
    assert err.strip().splitlines()[-1] == ("rlvr: error: stopped by SIGTERM while a call of user code had not "
                                            "returned; no checkpoint was written yet")
    assert not out.exists()
