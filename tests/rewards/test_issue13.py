"""Escape and resource attacks against the sandbox, with attack programs written for these tests: each
must score 0 or be contained, and the correct programs beside them must still score 1."""
import ctypes
import json
import platform
import secrets
import textwrap

import pytest

from rlvr.rewards import cgroup, seccomp
from rlvr.rewards.base import RewardFunction, clean_reason, score_batch
from rlvr.rewards.harness import dumps, loads
from rlvr.rewards.sandbox import SandboxLimits, run_harness
from rlvr.rewards.code import make_code_tests

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)
partial = make_code_tests(partial=True, timeout_s=LIMIT_S)


def block(src: str) -> str:
    return "```python\n" + textwrap.dedent(src).strip() + "\n```"


def verdict(src: str, spec, rw=reward):
    return rw.verdicts([block(src)], tests=[spec])[0]


# ---- the parent decides every check ---------------------------------------------------

# Real datasets' forms, none of them `expr == JSON literal`.
FORMS = {"kind": "assert", "entry_point": "root2", "asserts": [
    "assert abs(root2(2) - 1.41421356) < 1e-6",
    "import math\nassert math.isclose(root2(9), 3.0, rel_tol=1e-9)",
    "assert root2(4) != 5",
    "assert pair(3) == (3, 9)",                          # MBPP compares tuples
    "assert 1.9 < root2(4) <= 2.0 and 3 in [pair(3)[0]]",
    "import pytest\nwith pytest.raises(ValueError):\n    root2(-1)",
], "hidden": [
    "def check(candidate):\n    assert candidate(16) == 4.0\n    assert all(map(lambda x: candidate(x) >= 0, [0, 1, 4]))\n",
    "assert math.isclose(root2(2) ** 2, 2)",               # `math` not imported: MBPP keeps imports apart
]}
GOOD = """
    def root2(x):
        if x < 0:
            raise ValueError("negative")
        return x ** 0.5
    def pair(n):
        return (n, n * n)
"""


def test_every_form_passes_a_correct_program_and_is_decided_in_the_parent():
    v = verdict(GOOD, FORMS)
    assert (v.score, v.reason) == (1.0, "passed 8/8"), v.reason


FORGERIES = {
    # An object whose every comparison, arithmetic operator and abs succeeds, with math shadowed.
    "omni-object-and-fake-math": """
        import sys, types
        class Omni:
            def __eq__(s, o): return True
            __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__
            def __abs__(s): return 0
            def __sub__(s, o): return s
            __rsub__ = __add__ = __pow__ = __mul__ = __sub__
            def __float__(s): return 0.0
            def __getitem__(s, i): return 3
            def __contains__(s, o): return True
            def __bool__(s): return True
            __hash__ = object.__hash__
        fake = types.ModuleType("math")
        fake.isclose = lambda *a, **k: True
        sys.modules["math"] = fake
        import builtins; builtins.abs = lambda x: 0
        def root2(x): return Omni()
        def pair(n): return Omni()
    """,
    # Rebinding the harness's own functions and tables from inside: it can only change what
    # "the function returned", which the parent then judges.
    "rebind-harness-and-tables": """
        import sys
        h = sys.modules["__main__"]
        h.encode = lambda v, depth=0: 3.0
        h.answer = lambda ns, name, args, kwargs: ["v", 3.0]
        h._NONFINITE.clear(); h._type_name = lambda t: "float"
        def root2(x): return "nope"
        def pair(n): return [n, n * n]      # a list where a tuple is expected
    """,
    # StopIteration would end `map` early and make `all(...)` vacuously true if re-raised as itself.
    "stop-iteration-empties-map": """
        def root2(x):
            raise StopIteration
        def pair(n): raise StopIteration
    """,
    # Forge replies on every descriptor and then die before the real answers.
    "forge-replies-and-exit": """
        import os
        for fd in range(3, 40):
            try: os.write(fd, b'["ready"]\\n' + b'["v",3.0]\\n' * 20)
            except OSError: pass
        os._exit(0)
    """,
}


# A forger that makes every call "return" 3.0 earns exactly what an honest program returning 3.0
# earns (root2(9) == 3.0 and root2(4) != 5 hold for it): no more.
CONSTANT = "def root2(x): return 3.0\ndef pair(n): return 3.0"


@pytest.mark.parametrize("name", list(FORGERIES), ids=list(FORGERIES))
def test_forgeries_earn_no_more_than_the_values_they_answer(name):
    v = verdict(FORGERIES[name], FORMS, partial)
    if name in ("rebind-harness-and-tables", "forge-replies-and-exit"):
        honest = verdict(CONSTANT, FORMS, partial)
        # never more than the honest constant program (the forged replies may also be lost
        # when the forger exits before the parent's request arrives)
        assert honest.score == 2 / 8 and v.score <= honest.score, (v.reason, honest.reason)
    else:
        assert v.score == 0.0, v.reason
    assert verdict(FORGERIES[name], FORMS).score == 0.0     # and the default reward gives 0


@pytest.mark.parametrize("src, reason", [
    ("def f(a, b=0):\n    return (a + b,)", "failed case 1: expected [3], got (3,)"),
    ("def f(a, b=0):\n    return {a + b}", "failed case 1: expected [3], got {3}"),
], ids=["tuple-for-list", "set-for-list"])
def test_tuple_is_not_a_list(src, reason):
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [1, 2], "expected": [3]}]}
    assert (verdict(src, spec).score, verdict(src, spec).reason) == (0.0, reason)


def test_hidden_test_sources_and_values_never_enter_the_sandbox():
    """The program dumps everything it can see of the harness's state into an exception message;
    none of the hidden test's source or expected value is there, and hidden reasons show no message."""
    spec = {"kind": "assert", "asserts": ["assert leak(1) == 1"],
            "hidden": ["assert leak(2) == 'HIDDEN-EXPECTED-41'"]}
    spy = """
        import gc, sys
        def leak(x):
            seen = repr([o for o in gc.get_objects() if isinstance(o, (str, bytes, dict))])
            seen += repr(sys.argv) + open('/proc/self/cmdline', 'rb').read().decode('latin-1')
            if x == 1:
                return 1
            raise ValueError('HIDDEN-EXPECTED-41' in seen and 'FOUND' or 'absent ' + seen[:100])
    """
    v = verdict(spy, spec, partial)
    assert v.score == 0.5 and v.reason == "passed 1/2; failed case 2 (hidden): raised ValueError"
    visible = {"kind": "assert", "asserts": ["assert leak(2) == 'HIDDEN-EXPECTED-41'"]}
    assert "absent" in verdict(spy, visible).reason     # shown for a visible case: not found


@pytest.mark.parametrize("test, why", [
    ("assert Solver().run(2) == 4", "uses .run of the candidate's Solver"),
    ("assert f.cache == {}", "uses .cache of the candidate's f"),
    ("assert apply(lambda x: x + 1, 2) == 3", "passes a function to apply()"),
], ids=["method-of-object", "attribute", "lambda-argument"])
def test_checks_that_cannot_be_decided_outside_are_refused_naming_the_test(test, why):
    spec = {"kind": "assert", "asserts": ["assert f(1) == 1", test]}
    src = "class Solver:\n    def run(self, x): return x * 2\ndef f(x): return x\ndef apply(g, x): return g(x)"
    with pytest.raises(ValueError, match="case 2") as info:
        reward([block(src)], tests=[spec])
    assert why in str(info.value)


def test_codec_round_trips_types_and_rejects_anything_else():
    value = [None, True, 3, 2.5, float("inf"), "s", (1, [2]), {1, 2}, frozenset({3}), {(1, 2): b"\x00"}, 1 + 2j]
    back = loads(dumps(value))
    assert back == value and [type(x) for x in back] == [type(x) for x in value]
    for bad in ['{"x": 1}', '{"t": 1}', '{"s": [[1]]}', "NaN", '{"t": [1], "s": [2]}', "[" * 100000]:
        with pytest.raises(ValueError):
            loads(bad)


# ---- the keyring; and the seccomp filter ----------------------------------------------

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
        v = verdict(attack, {"kind": "assert", "asserts": ["assert steal() == 1"]})
        assert v.score == 0.0 and "caller-secret" not in v.reason, v.reason
        buf = ctypes.create_string_buffer(256)
        assert _libc.syscall(NR["keyctl"], 11, key, buf, 256) == len(payload)   # still there
        assert buf.raw[:len(payload)] == payload
        planted = _libc.syscall(NR["request_key"], b"user", b"planted", None, 0)
        assert planted < 0                                                      # nothing planted
    finally:
        _libc.syscall(NR["keyctl"], 21, key)                                    # KEYCTL_INVALIDATE


# ---- memory per run, the OOM killer takes the sandbox ---------------------------------

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
    good = block("a, b = map(int, input().split())\nprint(a + b)")
    vs = rw.verdicts([block(BOMB), good, good], tests=[stdio] * 3)
    assert [v.score for v in vs] == [0.0, 1.0, 1.0], [v.reason for v in vs]
    if cgroup.layout() is not None:
        assert vs[0].reason == "memory limit (whole run)"


def test_sysv_shared_memory_cannot_outlive_the_run():
    src = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n" \
          f"print(libc.syscall({NR['shmget']}, 0, 64 << 20, 0o1600), ctypes.get_errno())"
    assert run_harness({"source": src}, b"").stdout == b"-1 1\n"


# ---- reasons are printable and bounded ------------------------------------------------

def test_reasons_are_sanitised():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [], "expected": 1}]}
    v = verdict("def f():\n    raise ValueError('\\x1b[2J\\rok\\u202e' + 'x' * 5000)", spec)
    assert v.reason.startswith("failed case 1: raised ValueError: \\x1b[2J\\rok\\u202e")
    assert v.reason.isprintable() and len(v.reason) <= 300
    noisy = RewardFunction("noisy", 1.0, lambda completions, **kw: 1 / 0)
    assert clean_reason("a\nb\tc") == "a\\nb\\tc"
    scores = score_batch([noisy], ["x"], {})
    assert scores.reasons["noisy"][0].isprintable()


def test_without_a_cgroup_the_fallback_caps_processes_so_the_total_fits(monkeypatch):
    from rlvr.rewards import sandbox
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
