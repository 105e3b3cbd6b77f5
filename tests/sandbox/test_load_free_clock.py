"""A program's verdict does not depend on what else the machine runs: the time limit counts the time the
run would have taken on an idle machine (wall time less its run-queue delay, rlvr.sandbox.clock), the
wall clock only as the backstop. The load is real: busy processes, four per CPU, for a few seconds."""
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from rlvr.rewards.code import make_code_tests
from rlvr.rewards.workers import owned_by_run
from rlvr.sandbox.clock import RunClock, usable_cpus
from tests.conftest import python_block

LIMIT_S = 1.5
# about 0.55 s of CPU here: within the limit alone, past it in wall time with a fifth of a CPU or less
WORK = "s = 0\nfor i in range(6_000_000):\n    s += i % 7\n"
STDIO = {"kind": "stdio", "cases": [{"stdin": "3\n1 2\n3 4\n5 6\n", "stdout": "3\n7\n11"}]}
STDIO_SRC = WORK + "n = int(input())\nfor _ in range(n):\n    a, b = map(int, input().split())\n    print(a + b)\n"
ASSERT = {"kind": "assert", "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
ASSERT_SRC = WORK + "def add(a, b):\n    return a + b\n"


@contextmanager
def loaded_machine(per_cpu: int = 4):
    """`per_cpu` busy processes for each CPU (a load average of 8 on 2 cores, as where this was found): an
    honest program then gets a fraction of a CPU, whatever process started it."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(per_cpu * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)  # the spinners are running
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def test_the_clock_discounts_waiting_for_a_cpu_and_counts_sleep():
    with loaded_machine():
        worker = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        clock = RunClock(worker.pid, 0.5)
        time.sleep(1.5)
        starved = clock.left()   # 1.5 s of wall, about a sixth of it on the CPU
        worker.kill()
        worker.wait()
    assert starved > 0
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    clock = RunClock(sleeper.pid, 0.5)
    time.sleep(0.8)
    assert clock.left() == 0.0  # waiting on nothing but itself: its time is the wall clock's
    sleeper.kill()
    sleeper.wait()


@pytest.mark.parametrize("spec, src", [(STDIO, STDIO_SRC), (ASSERT, ASSERT_SRC)], ids=["stdio-loop", "assert-function"])
def test_an_honest_program_passes_on_a_loaded_cpu_as_on_an_idle_one(spec, src):
    reward = make_code_tests(timeout_s=LIMIT_S)
    with owned_by_run():
        idle = reward.verdicts([python_block(src)], tests=[spec])[0]
    with loaded_machine(), owned_by_run():
        t = time.monotonic()
        loaded = reward.verdicts([python_block(src)], tests=[spec])[0]
        took = time.monotonic() - t
    assert (idle.score, loaded.score) == (1.0, 1.0), (idle.reason, loaded.reason, took)


def test_a_sleeping_program_still_times_out_at_the_limit_under_load():
    reward = make_code_tests(timeout_s=LIMIT_S)
    with loaded_machine():
        v = reward.verdicts([python_block("import time\ntime.sleep(30)\nprint(3)")], tests=[STDIO])[0]
    assert (v.score, v.reason) == (0.0, "timed out after 1.5s")


# A tree that makes its own run-queue delay: processes that spin wait for each other's CPUs. Summed over
# its threads that delay passes the wall time, and the delay alone would let it run to the backstop.
SPINNERS = "import os\nfor _ in range({n}):\n    if os.fork() == 0:\n        break\nwhile True: pass\n"
# Two spinners that live, and children that spin 10 ms and exit between two looks at the tree.
SHORT_LIVED = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        while True: pass
while True:
    try:
        if os.fork() == 0:
            t = time.monotonic()
            while time.monotonic() - t < 0.01: pass
            os._exit(0)
    except OSError:
        pass
    try:
        while os.waitpid(-1, os.WNOHANG)[0]: pass
    except ChildProcessError:
        pass
"""


@pytest.mark.parametrize("src", [SPINNERS.format(n=4 * (os.cpu_count() or 1)), SHORT_LIVED],
                         ids=["spinning-processes", "short-lived-spinners"])
def test_a_tree_cannot_stretch_its_limit_with_its_own_run_queue_delay(src):
    """Its CPU time over the CPUs it may use is time an idle machine needs too: 2 s of wall time with every
    CPU busy is 2 s however much of it the tree's threads spent waiting for each other."""
    tree = subprocess.Popen([sys.executable, "-c", src], start_new_session=True)
    try:
        clock = RunClock(tree.pid, 0.5)
        time.sleep(2.0)
        assert clock.delay() > 2.0   # the wall time less the delay says it has hardly started
        assert clock.left() == 0.0
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()


def test_usable_cpus_are_the_fewer_of_the_affinity_and_a_container_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(str(tmp_path)) == affinity          # no quota files: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(str(tmp_path)) == affinity
    (tmp_path / "cpu.max").write_text("50000 100000\n")    # half a CPU: one
    assert usable_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(str(tmp_path)) == affinity
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")   # 1.5 CPUs: two, if the affinity has them
    assert usable_cpus(str(tmp_path)) == min(affinity, 2)
