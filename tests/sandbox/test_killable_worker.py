"""rlvr/sandbox/worker.py: the one killable worker class under the maths checker and the judge pool."""
import os
import resource
import signal
import threading

import pytest

from rlvr.rewards.maths.worker import SymbolicWorker
from rlvr.sandbox.worker import KillableWorker


@pytest.fixture
def past_fd_setsize():
    """Hold descriptors until the next pipe opened lands above 1024, where select.select raises."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"the hard open-files limit ({hard}) is below 1300")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_symbolic_worker_answers_when_its_pipes_are_past_fd_setsize(past_fd_setsize):
    worker = SymbolicWorker(timeout_s=10.0)
    try:
        assert worker.compare("x**2 - 1", "(x-1)*(x+1)") == (True, "equivalent")
        assert worker.process.stdout.fileno() > 1024
    finally:
        worker.close()


def test_ask_answers_then_a_hung_worker_is_killed_with_its_group():
    worker = KillableWorker("rlvr.rewards.maths.worker", "the symbolic maths worker")
    worker.start()
    pid = worker.proc.pid
    assert worker.ask({"answer": "1/2", "gold": "0.5"}, 10.0) == ({"equal": True, "reason": "equivalent"}, "")
    os.killpg(pid, signal.SIGSTOP)   # hung: no reply comes
    assert worker.ask({"answer": "1", "gold": "1"}, 0.3) == (None, "timed out")
    assert worker.proc is None and worker.last_pid == pid and not worker.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)   # killed and reaped, not left stopped


def test_shared_worker_is_one_worker_across_racing_threads():
    from rlvr.rewards.workers import owned_by_run

    with owned_by_run():   # a fresh set: the first use races
        _race_for_the_worker()


def _race_for_the_worker():
    from rlvr.rewards.workers import current

    barrier, got = threading.Barrier(8), []

    def take():
        barrier.wait()
        got.append(current().maths)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len({id(w) for w in got}) == 1


def test_each_run_owns_its_workers_and_closes_them():
    """Two runs in one process (two rlvr.fit calls in a notebook) share no maths worker, judge pool or restart
    count, and a run's workers end with it; outside a run, the process's own set is used."""
    from rlvr.rewards.workers import current, owned_by_run

    outside = current()
    with owned_by_run() as first:
        assert current() is first and first is not outside
        assert first.maths.compare("(x+1)^2", "x^2+2*x+1") == (True, "equivalent")  # the run's worker, started
        proc = first.maths.process
        assert proc is not None and proc.poll() is None
        first.maths._kill()  # what a hang past the limit costs: one restart, counted for this run
        assert first.maths_restarts == 1
    assert proc.poll() is not None and current() is outside  # closed with its run
    with owned_by_run() as second:
        assert second.maths_restarts == 0 and second.maths is not first.maths
        assert second.maths.compare("(x+1)^2", "x^2+2*x+1") == (True, "equivalent")
        assert second.maths.process.pid != proc.pid
