"""The judge worker (rlvr.rewards.code.judge): an assert spec's whole check runs in a killable worker
process under one wall clock, since trusted test code runs on the candidate's hostile replies; the worker's
own channel survives test code that prints or reads stdin, and a killed worker is replaced."""
import pytest

from rlvr.rewards.code import make_code_tests
from tests.conftest import ADD_ONE, python_block, returns_within

reward = make_code_tests(timeout_s=2.0)

COLLIDING = python_block("def f(x):\n    return [i * (2 ** 61 - 1) for i in range(1, 40001)]")  # all hash to 0
SET_SPEC = {"kind": "assert", "asserts": ["assert set(f(1)) == {4, 5}"]}


@pytest.mark.slow  # waits out a wall clock
def test_test_code_on_a_colliding_list_is_cut_at_the_checks_wall_clock():
    from rlvr.rewards.workers import current

    quick = make_code_tests(timeout_s=1.0, test_code_s=1.0)
    killed = current().judge.killed
    honest = python_block("def f(x):\n    return [4, 5, 4]")
    # on the load-free clock (rlvr.sandbox.clock) the check's 2 s are its CPU time: on a loaded machine the
    # wall time stretches, up to the backstop; the reason and the killed worker say the clock cut it
    verdicts = returns_within(60, quick.verdicts, [COLLIDING, honest], tests=[SET_SPEC] * 2)
    # set() over 40k colliding ints takes ~8 s holding the GIL: run in the trainer it would have no limit
    assert [(v.score, v.reason) for v in verdicts] == [
        (0.0, "timed out after 2.0s (the whole check, test code included)"), (1.0, "passed 1/1")]
    assert current().judge.killed == killed + 1


def test_test_code_that_prints_or_reads_stdin_cannot_corrupt_the_workers_replies():
    spec = {"kind": "assert", "asserts": ["print('{}')\nprint(f(1))\nassert f(1) == 2",
                                          "try:\n    input()\nexcept EOFError:\n    pass\nassert f(2) == 3"]}
    assert reward([ADD_ONE, python_block("def f(x):\n    return x")], tests=[spec] * 2) == [1.0, 0.0]
    assert reward([ADD_ONE], tests=[spec]) == [1.0]   # the same workers, still in step


@pytest.mark.slow  # waits out a wall clock
def test_a_killed_worker_is_replaced_and_the_next_check_is_judged():
    quick = make_code_tests(timeout_s=1.0, test_code_s=1.0)
    assert quick([COLLIDING], tests=[SET_SPEC]) == [0.0]
    assert quick([python_block("def f(x):\n    return [5, 4]")], tests=[SET_SPEC]) == [1.0]
