"""rlvr sets torch's OpenMP wait before torch loads (rlvr/__init__.py): threads spin a bounded while
(GOMP_SPINCOUNT 30000, about 0.3 ms) and then sleep (OMP_WAIT_POLICY PASSIVE); a value the user set wins."""
import os
import subprocess
import sys

SHOW = "import os, rlvr; print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])"


def env_after_import(**given: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return subprocess.run([sys.executable, "-c", SHOW], env={**env, **given}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_bounded_spin_then_sleep_unless_the_user_says_otherwise():
    assert env_after_import() == "PASSIVE 30000"
    assert env_after_import(GOMP_SPINCOUNT="0") == "PASSIVE 0"
    assert env_after_import(OMP_WAIT_POLICY="ACTIVE", GOMP_SPINCOUNT="300000") == "ACTIVE 300000"
