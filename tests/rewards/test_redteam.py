"""Red-team regressions: fresh attack programs against the code verifier's parent side. Each one
broke it before its fix (a parent hang, a batch-wide failure, unbounded parent memory); each must
now be contained while the honest programs beside it keep their scores."""
import textwrap
import time

import pytest

from rlvr.sandbox import harness
from rlvr.rewards.code import make_code_tests
from rlvr.sandbox.run import Sandbox, SandboxLimits
from rlvr.sandbox.program import Program

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)


def block(src: str) -> str:
    return "```python\n" + textwrap.dedent(src).strip() + "\n```"


# Writes raw lines to the response pipe (the first descriptor above stderr that takes a write),
# bypassing the harness's encoder: the sandbox controls every byte the parent reads. The descriptors
# keep the parent's numbers, which depend on what else the trainer holds open: look them all up.
FORGE = """
import os, time
def forge(data):
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2):
        try:
            os.write(fd, data[:1])
        except OSError:
            continue
        view = memoryview(data[1:])
        while view:
            view = view[os.write(fd, view):]
        return
"""

# ---- a set of colliding ints: O(n^2) to build in the parent, holding the GIL ----------------------

M = 2 ** 61 - 1   # hash(i * M) == 0 for every int i


def test_the_decoder_refuses_hash_collision_floods():
    with pytest.raises(ValueError):
        harness.loads('{"s":[' + ",".join(str(i * M) for i in range(1, 100)) + "]}")
    with pytest.raises(ValueError):
        harness.loads('{"d":[' + ",".join(f"[{i * M},0]" for i in range(1, 100)) + "]}")
    assert harness.loads(harness.dumps({-1, -2, 0, 1, 2})) == {-1, -2, 0, 1, 2}   # -1, -2 share a hash
    assert harness.loads(harness.dumps({i: i for i in range(5000)})) == {i: i for i in range(5000)}


COLLIDE = FORGE + """
body = ",".join(str(i * (2 ** 61 - 1)) for i in range(1, 40001))
forge(('["ready"]\\n["v",{"s":[' + body + ']}]\\n').encode())
time.sleep(5)
"""


def test_a_forged_colliding_set_costs_the_parent_no_more_than_its_time_limit():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "expected": [1]}]}
    t = time.monotonic()
    v = reward.verdicts([block(COLLIDE)], tests=[spec])[0]
    # Before the fix: ~13 s of parent CPU (quadratic set building) for a 1 s limit.
    assert v.score == 0.0 and time.monotonic() - t < LIMIT_S + 3.0, (v, time.monotonic() - t)


# ---- nesting: a returned value fed back into a call must not make the test Undecidable ------------

ROUND_TRIP = {"kind": "assert", "entry_point": "dec",
              "asserts": ["assert dec(enc('abc')) == 'abc'"], "hidden": ["assert dec(enc('xy')) == 'xy'"]}
HONEST = """
def enc(s):
    return [s]
def dec(x):
    return x[0]
"""
DEEP = """
def enc(s):
    v = s
    for _ in range(60):      # as deep as a return may be
        v = [v]
    return v
def dec(x):
    return 'abc'
"""
FORGED_DEEP = FORGE + """
deep = "[" * 500 + "]" * 500
forge(('["ready"]\\n' + ('["v",' + deep + ']\\n') * 4).encode())
time.sleep(5)
"""


def test_a_deep_return_fed_back_cannot_fail_the_whole_batch():
    # Before the fix the parent re-encoded the 60-deep value inside its argument list (61 deep),
    # raised "cannot be decided outside the sandbox" and the reward scored every completion 0.
    v = reward.verdicts([block(DEEP), block(FORGED_DEEP), block(HONEST)], tests=[ROUND_TRIP] * 3)
    assert [x.score for x in v] == [0.0, 0.0, 1.0], v
    assert v[1].reason.startswith("malformed answer"), v[1]


# ---- replies are capped per session, not per line -------------------------------------------------

FLOOD = FORGE + """
one = ('["v",[' + ",".join(["[]"] * 40000) + ']]\\n').encode()   # ~120 KB, ~2.5 MB decoded
forge(b'["ready"]\\n' + one * 32)
time.sleep(5)
"""


def test_many_large_replies_stop_at_the_channel_budget():
    limits = SandboxLimits(wall_s=2.0, cpu_s=2.0, channel_bytes=512 * 1024)
    with Program(textwrap.dedent(FLOOD), limits, Sandbox()) as s:
        replies = s.call([["f", harness.encode([i]), harness.encode({})] for i in range(32)])
    tags = [r[0] for r in replies]
    # Before the fix every reply under the per-line cap was decoded and held: 32 x 2.5 MB here,
    # and 4 MiB x cases at the default limits.
    assert tags.count("v") <= 5 and s.ended == "output too large", (tags, s.ended)


# ---- maths: repeated unclosed <answer> tags ------------------------------------------------------

def test_unclosed_answer_tags_cost_linear_time():
    from rlvr.rewards.maths.answer import final_answers
    from rlvr.rewards.maths.accuracy import math_accuracy_verdict
    flood = "<answer>" * 10000                      # 80 kB; the old regex took ~6 s on it
    t = time.monotonic()
    v = math_accuracy_verdict(flood + "\\boxed{5}", "5")
    assert time.monotonic() - t < 0.5 and v.score == 1.0, v
    assert final_answers("<answer>1</answer><answer> 2</answer>x<answer>3") == ["1", "2"]


# ---- local configuration under /usr (package-manager tokens) is not visible ---------------------

def test_usr_local_etc_is_empty_inside():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [], "expected": []}]}
    src = "import os\ndef f():\n    d = '/usr/local/etc'\n    return sorted(os.listdir(d)) if os.path.isdir(d) else []"
    v = reward.verdicts([block(src)], tests=[spec])[0]
    assert v.score == 1.0, v
