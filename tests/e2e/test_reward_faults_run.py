"""`rlvr train` with a user's reward that does more than raise, as the user runs it: a real .py reward file
named in rewards.weights, in a process of its own where the fault could take the process or its exit with it
(a thread left running, a hang ended by a signal), else in this one. The run goes on where the fault costs a
call, or stops at once with exit 2 and one line naming the reward; a reward's os.chdir or leftover thread
moves nothing and keeps nothing alive."""
import json
import os
import signal
import subprocess
import sys

from rlvr.cli import main
from tests.e2e.conftest import finished, wait_until

RUN = ["--model.name=tiny-random", "--train.steps=1", "--rollout.prompts_per_step=2", "--rollout.group_size=2",
       "--rollout.max_new_tokens=4", "--eval.max_new_tokens=4", "--task.ood_size=0", "--task.heldout_size=2",
       "--train.samples_every=0", "--train.threads=1"]
WEIGHTS = "--rewards.weights={r.py:f: 1.0, correctness: 1.0}"


def train(cwd, reward: str, *extra: str, **popen):
    (cwd / "r.py").write_text(reward)
    return subprocess.Popen([sys.executable, "-m", "rlvr", "train", *RUN, WEIGHTS, *extra], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()}, **popen)


def train_here(cwd, monkeypatch, reward: str, *extra: str) -> int:
    """train's run in this process (in `cwd`, where rewards.weights finds r.py): its exit status."""
    (cwd / "r.py").write_text(reward)
    monkeypatch.chdir(cwd)
    return main(["train", *RUN, WEIGHTS, *extra])


MOVES = """
import os, threading, time
threading.Thread(target=time.sleep, args=(3600,), name="left-by-r.py").start()  # non-daemon, never ends

def f(completions, answer, **kw):
    os.makedirs("../elsewhere", exist_ok=True)
    os.chdir("../elsewhere")
    scores = [0.5] * len(completions)
    completions.clear()       # the next reward, and the samples, keep the model's text
    answer[:] = ["0"] * len(answer)
    return scores
"""


def test_a_reward_that_chdirs_edits_its_inputs_and_leaves_a_thread_ends_with_its_run_in_place(tmp_path):
    (tmp_path / "work").mkdir()
    proc = train(tmp_path / "work", MOVES, "--train.out=run")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    run = tmp_path / "work" / "run"
    assert (run / "final" / "config.json").is_file() and (run / "summary.json").is_file()
    assert (run / "report.html").is_file() and list((run / "checkpoints").glob("step_*.pt"))
    assert not (tmp_path / "elsewhere" / "run").exists() and list((tmp_path / "elsewhere").iterdir()) == []
    assert "exiting without waiting for 1 thread(s) left running by loaded code (left-by-r.py)" in err
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all(s["rewards"]["r.py:f"]["score"] == 0.5 for s in samples)
    assert all(s["completion"] for s in samples)  # the model's text, not the reward's edit
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["reward/r.py:f/errors"] == 0 and metrics["reward/correctness/errors"] == 0


EXITS_IN_TRAINING = """
import sys
def f(completions, trainer_state, **kw):
    if trainer_state.max_steps:   # training (the preflight before it passes max_steps 0)
        sys.exit(0)
    return [1.0] * len(completions)
"""


def test_sys_exit_on_every_completion_stops_the_run_with_exit_2_naming_the_reward(tmp_path, monkeypatch, capsys):
    """In this process: a SystemExit that left the run would end the test with it (pytest fails it)."""
    assert train_here(tmp_path, monkeypatch, EXITS_IN_TRAINING, f"--train.out={tmp_path / 'run'}") == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("rlvr: error:"))
    assert line.startswith(f"rlvr: error: reward function 'r.py:f' ({tmp_path / 'r.py'}:3, function f) raised on "
                           "every completion of the batch, so the run stops")
    assert "SystemExit: 0" in err


HANGS_IN_TRAINING = """
import pathlib, time
def f(completions, trainer_state, **kw):
    if trainer_state.max_steps:
        pathlib.Path("hanging").touch()
        time.sleep(3600)
    return [1.0] * len(completions)
"""


def test_sigterm_during_a_hung_reward_stops_the_run_at_once(tmp_path):
    """The run waits on user code when the signal comes: it stops then, the step dropped, rather than after
    rewards.timeout_s (tests/e2e/test_user_code_ends.py holds the checkpoint of the steps done)."""
    proc = train(tmp_path, HANGS_IN_TRAINING, f"--train.out={tmp_path / 'run'}", "--rewards.timeout_s=60")
    wait_until((tmp_path / "hanging").exists, proc, "the reward hung")
    proc.send_signal(signal.SIGTERM)
    code, err = finished(proc, 120, "a run sent SIGTERM while a reward hung (it sleeps an hour)")
    assert code == 0, err
    assert "SIGTERM: stopping now: this step waits on user code" in err
    assert "did not return within rewards.timeout_s" not in err  # not cut by the reward's limit: by the signal


KILLS_ITS_WORKER = """
import os
def f(completions, **kw):
    if len(completions) > 1:
        os._exit(1)    # every batch call takes its process down
    return [1.0]
"""


def test_an_isolated_reward_that_kills_its_process_costs_calls_not_the_run(tmp_path, monkeypatch, capsys):
    """In this process: an os._exit that reached it would end the whole test session, not pass."""
    code = train_here(tmp_path, monkeypatch, KILLS_ITS_WORKER, f"--train.out={tmp_path / 'run'}",
                      "--rewards.isolate=true", "--rewards.timeout_s=20")
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    # each batch call crashed the worker; each row retried alone in a fresh one scored 1
    assert metrics["reward/r.py:f/mean"] == 1.0 and metrics["reward/r.py:f/errors"] == 0
    assert (tmp_path / "run" / "final" / "config.json").is_file()
