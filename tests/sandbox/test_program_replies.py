"""What a sandboxed program sends back is hostile data (rlvr.sandbox.harness's codec, rlvr.sandbox.pipes's
pipes, rlvr.sandbox.program): forged replies written straight to the response pipe never hang the
parent, fail the batch, or hold unbounded memory, and the honest programs beside them keep their scores."""
import json
import textwrap

import pytest

from rlvr.eval.grading import grade
from rlvr.sandbox import harness
from rlvr.rewards.code import make_code_tests
from rlvr.sandbox.program import Program
from rlvr.sandbox.outcome import Failure
from rlvr.sandbox.run import Sandbox, SandboxLimits
from rlvr.tasks import Problem
from tests.conftest import ADD_ONE, ADD_ONE_ASSERT_SPEC, ADD_ONE_FUNCTION_SPEC, python_block

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)

# Writes raw lines to the response pipe (the first descriptor above stderr that takes a write),
# bypassing the harness's encoder: the sandbox controls every byte the parent reads. The descriptors
# keep the parent's numbers, which depend on what else the trainer holds open: look them all up.
RAW_REPLY_FORGER = """
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


def test_codec_round_trips_types_and_rejects_anything_else():
    value = [None, True, 3, 2.5, float("inf"), "s", (1, [2]), {1, 2}, frozenset({3}), {(1, 2): b"\x00"}, 1 + 2j]
    back = harness.loads(harness.dumps(value))
    assert back == value and [type(x) for x in back] == [type(x) for x in value]
    for bad in ['{"x": 1}', '{"t": 1}', '{"s": [[1]]}', "NaN", '{"t": [1], "s": [2]}', "[" * 100000]:
        with pytest.raises(ValueError):
            harness.loads(bad)


# ---- a set of colliding ints: O(n^2) to build in the parent, holding the GIL ----------------------

M = 2 ** 61 - 1   # hash(i * M) == 0 for every int i


def test_the_decoder_refuses_hash_collision_floods():
    with pytest.raises(ValueError):
        harness.loads('{"s":[' + ",".join(str(i * M) for i in range(1, 100)) + "]}")
    with pytest.raises(ValueError):
        harness.loads('{"d":[' + ",".join(f"[{i * M},0]" for i in range(1, 100)) + "]}")
    assert harness.loads(harness.dumps({-1, -2, 0, 1, 2})) == {-1, -2, 0, 1, 2}   # -1, -2 share a hash
    assert harness.loads(harness.dumps({i: i for i in range(5000)})) == {i: i for i in range(5000)}


COLLIDE = RAW_REPLY_FORGER + """
body = ",".join(str(i * (2 ** 61 - 1)) for i in range(1, 40001))
forge(('["ready"]\\n["v",{"s":[' + body + ']}]\\n').encode())
time.sleep(5)
"""


def test_a_forged_colliding_set_costs_the_parent_no_more_than_its_time_limit(monkeypatch):
    """Unbounded, the parent's quadratic set building takes ~13 s of CPU for a 1 s limit: the parent refuses
    the reply by its hashes (harness._spread) before it builds any set of it, and no set is ever built."""
    refused, spread = [], harness._spread

    def counted(keys):
        try:
            spread(keys)
        except ValueError as e:
            refused.append((len(keys), str(e)))
            raise

    monkeypatch.setattr(harness, "_spread", counted)
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "expected": [1]}]}
    v = reward.verdicts([python_block(COLLIDE)], tests=[spec])[0]
    assert (v.score, v.reason, v.outcome) == (0.0, "malformed answer from the sandbox", "sandbox_error"), v
    assert refused == [(40000, "too many keys with one hash")]


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
FORGED_DEEP = RAW_REPLY_FORGER + """
deep = "[" * 500 + "]" * 500
forge(('["ready"]\\n' + ('["v",' + deep + ']\\n') * 4).encode())
time.sleep(5)
"""


def test_a_deep_return_fed_back_cannot_fail_the_whole_batch():
    # Re-encoded inside the parent's argument list the 60-deep value is 61 deep: were the argument
    # depth the return depth, the parent would raise "cannot be decided outside the sandbox" and the
    # reward would score every completion 0.
    v = reward.verdicts([python_block(DEEP), python_block(FORGED_DEEP), python_block(HONEST)], tests=[ROUND_TRIP] * 3)
    assert [x.score for x in v] == [0.0, 0.0, 1.0], v
    assert v[1].reason.startswith("malformed answer"), v[1]


# ---- replies are capped per session, not per line -------------------------------------------------

FLOOD = RAW_REPLY_FORGER + """
one = ('["v",[' + ",".join(["[]"] * 40000) + ']]\\n').encode()   # ~120 KB, ~2.5 MB decoded
forge(b'["ready"]\\n' + one * 32)
time.sleep(5)
"""


def test_many_large_replies_stop_at_the_channel_budget():
    # limits far above the flood's 5 s: what ends it is the channel's budget, however loaded the machine (at
    # 2 s, decoding the first replies on a loaded machine outlasted the clock, and the run ended "timed out")
    limits = SandboxLimits(wall_s=30.0, cpu_s=30.0, channel_bytes=512 * 1024)
    with Program(textwrap.dedent(FLOOD), limits, Sandbox()) as s:
        replies = s.call([["f", harness.encode([i]), harness.encode({})] for i in range(32)])
    tags = [r[0] for r in replies]
    # Without a per-run total every reply under the per-line cap would be decoded and held: 32 x 2.5 MB
    # here, and 4 MiB x cases at the default limits.
    assert tags.count("v") <= 5 and s.ended == Failure("sandbox_error", "output too large"), (tags, s.ended)


# ---- a reply tag that is not a string ----------------------------------------------------------

LIST_TAG = python_block(RAW_REPLY_FORGER + 'forge(b\'["ready"]\\n[["v"],2]\\n[["v"],42]\\n\')\ntime.sleep(1)')


@pytest.mark.parametrize("spec", [ADD_ONE_FUNCTION_SPEC, ADD_ONE_ASSERT_SPEC], ids=["function", "assert"])
def test_a_list_reply_tag_fails_only_its_own_program(spec):
    verdicts = reward.verdicts([ADD_ONE] * 7 + [LIST_TAG], tests=[spec] * 8)
    assert [v.score for v in verdicts] == [1.0] * 7 + [0.0]
    assert verdicts[-1].reason == "malformed answer from the sandbox"


def test_evaluation_grading_survives_a_list_reply_tag():
    p = Problem(question="write f", answer="", tests=json.dumps(ADD_ONE_ASSERT_SPEC))
    grades = grade([p, p], [ADD_ONE, LIST_TAG])
    assert [g["correct"] for g in grades] == [1.0, 0.0]
    assert grades[1]["reason"] == "malformed answer from the sandbox"
