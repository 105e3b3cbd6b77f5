"""The trainer's children (sandboxes, judge workers, the maths worker): finished sandboxes are reaped also where
the trainer is PID 1 (rlvr.sandbox.pipes), and no child runs the destructors of the trainer's thread state."""
import json
import os
import subprocess
import sys

import pytest

from rlvr.rewards.code import make_code_tests
from tests.conftest import ADD_ONE, ADD_ONE_ASSERT_SPEC, ADD_ONE_FUNCTION_SPEC

reward = make_code_tests(timeout_s=2.0)


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
    out = subprocess.run([sys.executable, "-c", ZOMBIES, json.dumps([ADD_ONE_FUNCTION_SPEC, ADD_ONE_ASSERT_SPEC])], capture_output=True,
                         text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [[1.0, 0.0] * 3 + [1.0], 0]


# ---- the trainer's own threads: nothing of them runs in a child -----------------------------------

def test_no_child_runs_the_destructors_of_the_trainers_thread_state(tmp_path):
    """A preexec_fn makes CPython's forked child clear every other thread's state first, running
    destructors of what they hold; after FSDP, torch's thread-local caches reach a gloo process group
    whose destructor can hang or crash the child. Sandboxes, judge workers and the maths worker all start from worker threads here while
    this thread holds an object that notes any process other than ours destroying it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rlvr.rewards.code.judge import JudgePool
    from rlvr.rewards.maths.worker import SymbolicWorker

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
            assert threads.submit(reward.verdicts, [ADD_ONE] * 3, tests=[ADD_ONE_FUNCTION_SPEC] * 3).result()[0].score == 1.0
            request = {"program": ADD_ONE.strip("`\npython"), "tests": json.dumps(ADD_ONE_ASSERT_SPEC), "partial": False,
                       "limits": {}, "sandbox": {}}
            assert threads.submit(pool.check, request, 30.0).result() == {"outcomes": [[True, "", ""], [True, "", ""]]}
            assert threads.submit(symbolic.compare, "1/2", "0.5").result()[0]
    finally:
        pool.close()
        symbolic.close()
    assert not mark.exists()
