"""rlvr picks torch's OpenMP wait before torch loads (rlvr/__init__.py): sleep at once (PASSIVE) where the
load average is at least the core count, libgomp's default spin elsewhere; a value the user set wins."""
import os
import subprocess
import sys

from rlvr import openmp_wait


def test_threads_sleep_at_once_only_on_a_busy_machine():
    assert openmp_wait(2.0, 2) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert openmp_wait(17.5, 2) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert openmp_wait(1.9, 2) == {}
    assert openmp_wait(0.0, 16) == {}


def test_the_user_s_policy_wins():
    env = {**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}
    out = subprocess.run([sys.executable, "-c", "import os, rlvr; print(os.environ['OMP_WAIT_POLICY'])"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "ACTIVE"
