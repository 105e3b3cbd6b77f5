"""The whole runs the e2e tests share. Each distinct small run is trained once in the session (`trained`,
keyed by its arguments) and read by every test that needs it; a test that changes a run works on its own
copy (`copy_run`). `crashed` stops a run inside this process as a kill would, so most resume and fault tests
need no process of their own (tests/e2e/test_resume.py keeps one real SIGKILL per path)."""
import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rlvr.cli import main


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """trained(*ARGS): the run directory of `rlvr train ARGS`, trained the first time a test asks for those
    ARGS and shared from then on: read it, or change a copy_run of it, never it."""
    runs: dict[tuple[str, ...], Path] = {}

    def run(*args: str) -> Path:
        if args not in runs:
            out = tmp_path_factory.mktemp("trained") / "run"
            assert main(["train", *args, f"--train.out={out}"]) == 0
            runs[args] = out
        return runs[args]

    return run


def copy_run(src: Path, dst: Path) -> Path:
    """A run directory of one's own to change: dst, a copy of src (a run resumes from wherever it is)."""
    shutil.copytree(src, dst)
    return dst


def wait_until(done, proc: subprocess.Popen, what: str, backstop_s: float = 300, stop=None) -> None:
    """Poll `done()` until it is true while `proc` runs (a run to be signalled or killed once it got somewhere).
    A hang backstop, never a measure of speed: the test fails naming `what` it waited for when `proc` ended
    first, or when `backstop_s` passed (far above what a loaded machine needs); `proc` is then stopped with
    `stop(proc)` (default: killed), so no run is left behind."""
    deadline = time.monotonic() + backstop_s
    while not done():
        ended = proc.poll() is not None
        if ended or time.monotonic() > deadline:
            (stop or subprocess.Popen.kill)(proc)
            proc.wait()
            err = proc.stderr.read() if proc.stderr and not proc.stderr.closed else ""  # the caller may communicate
            why = f"the process ended (exit {proc.returncode}) before" if ended else f"{backstop_s:g} s passed without"
            pytest.fail(f"{why} {what}; its stderr ends:\n{err[-3000:]}", pytrace=False)
        time.sleep(0.05)


def finished(proc: subprocess.Popen, backstop_s: float, what: str, stop=None) -> tuple[int, str]:
    """(exit status, stderr) of `proc` once it ends; a hang backstop as wait_until's: after `backstop_s` the
    test fails saying `what` was still running, with its stderr, `proc` stopped with `stop(proc)`."""
    try:
        _, err = proc.communicate(timeout=backstop_s)
    except subprocess.TimeoutExpired:
        (stop or subprocess.Popen.kill)(proc)
        err = proc.communicate()[1] or ""
        pytest.fail(f"{what}: still running after {backstop_s:g} s; its stderr ends:\n{err[-3000:]}", pytrace=False)
    return proc.returncode, err


class Crash(BaseException):
    """A kill, raised in the run's own process as a step begins. Nothing in rlvr catches a BaseException of
    its own kind, so the run stops there with what it wrote so far; unlike a SIGKILL its `finally` blocks run
    (the lock is released, the files closed), which is why a real SIGKILL is kept for each resume path."""


@contextlib.contextmanager
def at_step(step: int, action):
    """Within: `action()` runs inside the `rlvr train` of this process as step `step` begins (its metrics.jsonl
    then holds step - 1 rows and every checkpoint due before it)."""
    import rlvr.train.grpo as grpo

    real = grpo.train_step

    def train_step(run, k, *args, **kwargs):
        if k == step:
            action()
        return real(run, k, *args, **kwargs)

    grpo.train_step = train_step
    try:
        yield
    finally:
        grpo.train_step = real


@contextlib.contextmanager
def crash_at(step: int):
    """Within: the `rlvr train` in this process stops as if killed when step `step` begins; the block must end
    in that crash."""
    def kill():
        raise Crash(f"killed as step {step} began")

    with at_step(step, kill), pytest.raises(Crash):
        yield


def crashed(args: list[str], out: Path, step: int) -> Path:
    """`rlvr train ARGS --train.out=OUT` in this process, killed as step `step` begins."""
    with crash_at(step):
        main(["train", *args, f"--train.out={out}"])
    return out


@pytest.fixture(scope="session")
def learning(tmp_path_factory) -> list[str]:
    """test_resume's run with a reward that varies within groups (tests/e2e/test_run_faults.py:learning_run)."""
    from tests.e2e.test_run_faults import learning_run

    return learning_run(tmp_path_factory.mktemp("reward"))


@pytest.fixture(scope="session")
def learning_alone(trained, learning) -> Path:
    """The learning run left alone, the value-for-value reference of the resume and fault tests (test_resume,
    test_run_faults, test_full_disk): one run, read and never written by them (each copies what it changes)."""
    from tests.e2e.test_resume import read_jsonl

    out = trained(*learning)
    kl = [m["kl"] for m in read_jsonl(out / "metrics.jsonl")]
    assert kl[0] == 0.0 and kl[1] > 0  # the policy moved away from the reference at step 1
    return out


@pytest.fixture(scope="session")
def stopped_at_4(trained, learning) -> tuple[Path, dict]:
    """The learning run ended after step 4: checkpoints at steps 2 and 4, a final evaluation; its summary."""
    import json

    from rlvr.train.checkpoint import checkpoints

    out = trained(*learning, "--train.steps=4")
    assert [p.name for p in checkpoints(out)] == ["step_000002.pt", "step_000004.pt"]
    return out, json.loads((out / "summary.json").read_text())
