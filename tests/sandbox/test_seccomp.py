"""The seccomp filter (rlvr.sandbox.seccomp): each listed call fails with EPERM inside the sandbox while
ordinary programs (threads, subprocesses, multiprocessing, temp files) still run; the caller's session
keyring is out of reach; SysV shared memory, which would outlive the run, cannot be made."""
import ctypes
import json
import platform
import secrets

import pytest

from rlvr.sandbox import seccomp
from rlvr.rewards.code import make_code_tests
from rlvr.sandbox.run import run_harness
from tests.conftest import python_block

reward = make_code_tests(timeout_s=1.0)

_libc = ctypes.CDLL(None, use_errno=True)
NR = seccomp.ARCHES[platform.machine()][1]  # name -> number on this machine


def _syscall_probe(names: list[str]) -> dict:
    src = f"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
out = {{}}
for name, nr in {[(n, NR[n]) for n in names]!r}:
    ctypes.set_errno(0)
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    out[name] = [r, ctypes.get_errno()]
print(json.dumps(out))
"""
    r = run_harness({"source": src}, b"")
    assert r.exit_code == 0, r.stderr_tail
    return json.loads(r.stdout)


def test_seccomp_denies_each_listed_call_with_eperm():
    seen = _syscall_probe(list(NR))
    assert {n: v for n, v in seen.items() if v != [-1, 1]} == {}


def test_ordinary_programs_still_run_under_the_filter():
    src = "import threading, subprocess, multiprocessing, tempfile\nt = threading.Thread(target=print)\nt.start()\n" \
          "t.join()\nprint(subprocess.run(['echo', 'hi'], capture_output=True).stdout.decode().strip())\n" \
          "open(tempfile.mktemp(), 'w').write('x')\nprint(multiprocessing.Lock() is not None)"
    r = run_harness({"source": src}, b"")
    assert (r.exit_code, r.stdout) == (0, b"\nhi\nTrue\n"), r.stderr_tail


def test_the_callers_session_keyring_is_out_of_reach():
    name, payload = f"rlvr-test-{secrets.token_hex(4)}".encode(), b"caller-secret-2718"
    key = _libc.syscall(NR["add_key"], b"user", name, payload, len(payload), -3)   # -3: session keyring
    if key < 0:
        pytest.skip(f"cannot add a key here (errno {ctypes.get_errno()})")
    try:
        attack = f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            def steal():
                buf = ctypes.create_string_buffer(256)
                got = libc.syscall({NR['keyctl']}, 11, {key}, buf, 256)            # KEYCTL_READ
                libc.syscall({NR['keyctl']}, 7, -3)                                 # KEYCTL_CLEAR
                libc.syscall({NR['add_key']}, b"user", b"planted", b"x", 1, -3)
                raise ValueError(repr(buf.raw[:max(got, 0)]) + str(got))
        """
        v = reward.verdicts([python_block(attack)], tests=[{"kind": "assert", "asserts": ["assert steal() == 1"]}])[0]
        assert v.score == 0.0 and "caller-secret" not in v.reason, v.reason
        buf = ctypes.create_string_buffer(256)
        assert _libc.syscall(NR["keyctl"], 11, key, buf, 256) == len(payload)   # still there
        assert buf.raw[:len(payload)] == payload
        planted = _libc.syscall(NR["request_key"], b"user", b"planted", None, 0)
        assert planted < 0                                                      # nothing planted
    finally:
        _libc.syscall(NR["keyctl"], 21, key)                                    # KEYCTL_INVALIDATE


def test_sysv_shared_memory_cannot_outlive_the_run():
    src = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n" \
          f"print(libc.syscall({NR['shmget']}, 0, 64 << 20, 0o1600), ctypes.get_errno())"
    assert run_harness({"source": src}, b"").stdout == b"-1 1\n"
