"""One completion never sinks its batch or stalls the trainer, whatever it sends back. Each attack
here is a way a hostile program could; the honest programs beside it must keep their scores."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.eval.grading import grade
from rlvr.rewards.audit import code_findings
from rlvr.rewards.code import make_code_tests, parse_spec
from rlvr.tasks import Problem, Splits

reward = make_code_tests(timeout_s=2.0)


def block(src: str) -> str:
    return "```python\n" + textwrap.dedent(src).strip() + "\n```"


# Writes raw lines to the response pipe (the first descriptor above stderr that takes a write),
# bypassing the harness's encoder: the program controls every byte the parent reads. The descriptors
# keep the parent's numbers, which depend on what else the trainer holds open: look them all up.
FORGE = """
import os, time
def forge(data):
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2):
        try:
            os.write(fd, data)
            return
        except OSError:
            continue
"""
GOOD = block("def f(x):\n    return x + 1")
FN_SPEC = {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "expected": 2}]}
ASSERT_SPEC = {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert f(41) == 42"]}


# ---- 1: a reply tag that is not a string ----------------------------------------------------------

LIST_TAG = block(FORGE + 'forge(b\'["ready"]\\n[["v"],2]\\n[["v"],42]\\n\')\ntime.sleep(1)')


@pytest.mark.parametrize("spec", [FN_SPEC, ASSERT_SPEC], ids=["function", "assert"])
def test_a_list_reply_tag_fails_only_its_own_program(spec):
    verdicts = reward.verdicts([GOOD] * 7 + [LIST_TAG], tests=[spec] * 8)
    assert [v.score for v in verdicts] == [1.0] * 7 + [0.0]
    assert verdicts[-1].reason == "malformed answer from the sandbox"


def test_evaluation_grading_survives_a_list_reply_tag():
    p = Problem("write f", "", tests=json.dumps(ASSERT_SPEC))
    grades = grade([p, p], [GOOD, LIST_TAG])
    assert [g["correct"] for g in grades] == [1.0, 0.0]
    assert grades[1]["reason"] == "malformed answer from the sandbox"


# ---- 2: trusted test code on hostile plain data ----------------------------------------------------

COLLIDING = block("def f(x):\n    return [i * (2 ** 61 - 1) for i in range(1, 40001)]")  # all hash to 0
SET_SPEC = {"kind": "assert", "asserts": ["assert set(f(1)) == {4, 5}"]}


@pytest.mark.slow  # waits out a wall clock
def test_test_code_on_a_colliding_list_is_cut_at_the_checks_wall_clock():
    from rlvr.rewards.judge_worker import shared_pool

    quick = make_code_tests(timeout_s=1.0, test_code_s=1.0)
    killed = shared_pool().killed
    honest = block("def f(x):\n    return [4, 5, 4]")
    t = time.monotonic()
    verdicts = quick.verdicts([COLLIDING, honest], tests=[SET_SPEC] * 2)
    # Before: set() over 40k colliding ints ran in the trainer, ~8 s holding the GIL, no limit at all.
    assert [(v.score, v.reason) for v in verdicts] == [
        (0.0, "timed out after 2.0s (the whole check, test code included)"), (1.0, "passed 1/1")]
    assert shared_pool().killed == killed + 1
    assert time.monotonic() - t < 6.0


def test_test_code_that_prints_or_reads_stdin_cannot_corrupt_the_workers_replies():
    spec = {"kind": "assert", "asserts": ["print('{}')\nprint(f(1))\nassert f(1) == 2",
                                          "try:\n    input()\nexcept EOFError:\n    pass\nassert f(2) == 3"]}
    assert reward([GOOD, block("def f(x):\n    return x")], tests=[spec] * 2) == [1.0, 0.0]
    assert reward([GOOD], tests=[spec]) == [1.0]   # the same workers, still in step


@pytest.mark.slow  # waits out a wall clock
def test_a_killed_worker_is_replaced_and_the_next_check_is_judged():
    quick = make_code_tests(timeout_s=1.0, test_code_s=1.0)
    assert quick([COLLIDING], tests=[SET_SPEC]) == [0.0]
    assert quick([block("def f(x):\n    return [5, 4]")], tests=[SET_SPEC]) == [1.0]


# ---- 5: a candidate named like a builtin ----------------------------------------------------------

MAX_SPEC = {"kind": "assert", "entry_point": "max", "asserts": ["assert max([1, 5, 2]) == 5"],
            "hidden": ["assert max([-3, -7]) == -3"]}


def test_a_candidate_named_like_a_builtin_is_the_one_called():
    honest = block("def max(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n"
                   "    return best")
    wrong = block("def max(xs):\n    return xs[0]")
    verdicts = reward.verdicts([block("pass"), honest, wrong], tests=[MAX_SPEC] * 3)
    assert [v.score for v in verdicts] == [0.0, 1.0, 0.0]
    assert verdicts[0].reason == "no function named max"
    assert verdicts[2].reason == "failed case 1: assertion failed"


def test_a_spec_that_never_calls_the_candidate_is_refused():
    with pytest.raises(ValueError, match="never calls a function of the candidate.*'entry_point'"):
        parse_spec({"kind": "assert", "asserts": ["assert sorted([2, 1]) == [1, 2]"]})


def test_audit_flags_cases_that_never_call_the_candidate():
    spec = {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert sum([1, 2]) == 3"]}
    found = code_findings(Splits(train=[Problem("write f", "", tests=json.dumps(spec))], heldout=[], ood=[]))
    assert found == ["train: 1 assert cases never call a function of the candidate, so every program passes "
                     "them (e.g. case 2 of 'write f': 'assert sum([1, 2]) == 3'); a function named like a "
                     "builtin needs its name as 'entry_point'"]


# ---- 6: SystemExit and other BaseExceptions do not satisfy pytest.raises(Exception) ---------------

RAISES_SPEC = {"kind": "assert", "asserts": ["import pytest\nwith pytest.raises(Exception):\n    f(-1)",
                                             "assert f(1) == 2"]}


def test_a_base_exception_does_not_satisfy_raises_exception():
    honest = block("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x + 1")
    programs = [honest] + [block(f"def f(x):\n    if x < 0:\n        raise {e}\n    return x + 1")
                           for e in ("SystemExit(3)", "KeyboardInterrupt", "GeneratorExit",
                                     "type('Mine', (BaseException,), {})('no')")]
    verdicts = reward.verdicts(programs, tests=[RAISES_SPEC] * len(programs))
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [v.reason for v in verdicts[1:]] == [
        "failed case 1: raised SystemExit: 3", "failed case 1: raised KeyboardInterrupt",
        "failed case 1: raised GeneratorExit", "failed case 1: raised Mine: no"]


def test_a_test_may_still_expect_a_builtin_exception():
    spec = {"kind": "assert", "asserts": ["import pytest\nwith pytest.raises(ZeroDivisionError):\n    f(0)"]}
    assert reward([block("def f(x):\n    return 1 / x"), block("def f(x):\n    return 0")],
                  tests=[spec] * 2) == [1.0, 0.0]


# ---- 8: finished sandboxes are reaped, also where the trainer is PID 1 ----------------------------

ZOMBIES = """
import ctypes, json, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us, as to a PID 1
from rlvr.rewards.code import make_code_tests
good = "```python\\ndef f(x):\\n    return x + 1\\nprint(2)\\n```"
hang = "```python\\ndef f(x):\\n    while True: pass\\n```"
stdio = {"kind": "stdio", "cases": [{"stdin": "", "stdout": "2"}]}
specs = json.loads(sys.argv[1])
scores = make_code_tests(timeout_s=1.0)([good, hang] * 3 + [good], tests=specs[:2] * 3 + [stdio])
zombies = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if fields[0] == "Z" and int(fields[1]) == os.getpid():
        zombies.append(pid)
print(json.dumps([scores, len(zombies)]))
"""


@pytest.mark.slow  # waits out a wall clock
def test_no_zombie_sandboxes_remain_where_we_are_the_reaper():
    out = subprocess.run([sys.executable, "-c", ZOMBIES, json.dumps([FN_SPEC, ASSERT_SPEC])], capture_output=True,
                         text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [[1.0, 0.0] * 3 + [1.0], 0]


# ---- the trainer's own threads: nothing of them runs in a child -----------------------------------

def test_no_child_runs_the_destructors_of_the_trainers_thread_state(tmp_path):
    """A preexec_fn makes CPython's forked child clear every other thread's state first, running
    destructors of what they hold; after FSDP, torch's thread-local caches reach a gloo process group
    whose destructor hung or crashed the child (the suite stopped at the first code reward after the
    FSDP tests). Sandboxes, judge workers and the maths worker all start from worker threads here while
    this thread holds an object that notes any process other than ours destroying it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rlvr.rewards.judge_worker import JudgePool
    from rlvr.rewards.math_worker import SymbolicWorker

    mark, parent = tmp_path / "destroyed_in", os.getpid()

    class Sentinel:
        def __del__(self):
            if os.getpid() != parent:
                with open(mark, "a") as f:
                    f.write(f"{os.getpid()}\n")

    held = threading.local()
    held.sentinel = Sentinel()
    pool, symbolic = JudgePool(), SymbolicWorker()
    try:
        with ThreadPoolExecutor(2) as threads:
            assert threads.submit(reward.verdicts, [GOOD] * 3, tests=[FN_SPEC] * 3).result()[0].score == 1.0
            request = {"program": GOOD.strip("`\npython"), "tests": json.dumps(ASSERT_SPEC), "partial": False,
                       "limits": {}, "sandbox": {}}
            assert threads.submit(pool.check, request, 30.0).result() == {"outcomes": [[True, ""], [True, ""]]}
            assert threads.submit(symbolic.compare, "1/2", "0.5").result()[0]
    finally:
        pool.close()
        symbolic.close()
    assert not mark.exists()
