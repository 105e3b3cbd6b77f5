"""Memory per run (rlvr.sandbox.cgroup, or the fallback's process cap without a cgroup): the OOM killer's
first choice is the sandbox, a memory bomb is stopped without harming the caller or its neighbours in the
batch, and without a cgroup the process cap keeps the run's total within its budget."""
import pytest

from rlvr.sandbox import cgroup
from rlvr.rewards.code import make_code_tests
from rlvr.sandbox.run import SandboxLimits, run_harness
from tests.conftest import python_block


def test_sandbox_is_the_oom_killers_first_choice():
    r = run_harness({"source": "print(open('/proc/self/oom_score_adj').read().strip())"}, b"")
    assert r.stdout == b"1000\n"
    assert open("/proc/self/oom_score_adj").read().strip() != "1000"


BOMB = """
import os, time
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(100 << 20)        # within each process's address-space limit
            for j in range(0, len(block), 4096):
                block[j] = 1                    # touched, so really resident
        except MemoryError:
            pass
        time.sleep(5)
        os._exit(0)
    kids.append(pid)
for p in kids:
    os.waitpid(p, 0)
print(3)
"""


@pytest.mark.slow
def test_a_memory_bomb_is_bounded_per_run_and_its_neighbours_are_scored():
    """8 processes x 100 MiB against a 256 MiB run budget: the run is stopped (cgroup OOM, or the
    fallback's process cap), the caller lives, and the correct programs in the batch pass."""
    limits = SandboxLimits(wall_s=4, cpu_s=4, memory_bytes=160 << 20, run_memory_bytes=256 << 20)
    rw = make_code_tests(limits=limits)
    stdio = {"kind": "stdio", "cases": [{"stdin": "1 2", "stdout": "3"}]}
    good = python_block("a, b = map(int, input().split())\nprint(a + b)")
    vs = rw.verdicts([python_block(BOMB), good, good], tests=[stdio] * 3)
    assert [v.score for v in vs] == [0.0, 1.0, 1.0], [v.reason for v in vs]
    if cgroup.layout() is not None:
        assert vs[0].reason == "memory limit (whole run)"


def test_without_a_cgroup_the_fallback_caps_processes_so_the_total_fits(monkeypatch):
    from rlvr.sandbox import run as sandbox
    assert sandbox.fallback_procs(SandboxLimits()) == 4                   # 2 GiB / 512 MiB
    assert sandbox.fallback_procs(SandboxLimits(run_memory_bytes=8 << 30, max_procs=8)) == 8
    monkeypatch.setattr(cgroup, "create", lambda *a: None)
    fork_one = "import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\nprint('ok')"
    r = run_harness({"source": fork_one}, b"")
    assert r.stdout == b"ok\n", r.stderr_tail
    bomb = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(3)\n" \
           "        n += 1\nexcept OSError:\n    print(n)"
    r = run_harness({"source": bomb}, b"")
    assert int(r.stdout) <= 2        # harness + bwrap's init + at most 2 children under the cap of 4
