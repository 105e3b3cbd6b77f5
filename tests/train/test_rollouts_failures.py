"""rlvr.train.overlap.Rollouts when a collection or a weight push fails (a vLLM server that died): the error is a
RolloutError, and `state` still describes the policy as the last finished step left it, which the loop checkpoints.
Against real vLLM servers: tests/rollout/test_vllm_server.py (a server killed mid-run)."""
from types import SimpleNamespace

import pytest
import torch

from rlvr.errors import RlvrError
from rlvr.train.overlap import RolloutError, Rollouts


class Engine:
    """Counts its pushes; the push numbered `fail_at` raises as a dead server does."""

    def __init__(self, fail_at: int | None = None):
        self.pushes, self.fail_at = 0, fail_at

    def sync_weights(self, policy) -> None:
        self.pushes += 1
        if self.pushes == self.fail_at:
            raise RlvrError("vLLM server http://x: /collective_rpc failed")


def collector(fail_at: int | None = None):
    def collect(step: int):
        if step == fail_at:
            raise RlvrError("vLLM server http://x: /v1/completions failed")
        return SimpleNamespace(step=step, metrics={})
    return collect


POLICY = torch.nn.Linear(1, 1)


def test_synchronously_the_update_is_pushed_before_the_next_rollout_and_the_last_one_never():
    engine = Engine()
    with Rollouts(collector(), engine, POLICY, one_step_off=False) as rollouts:
        for step in (1, 2, 3):
            assert rollouts.take(step, 3).step == step
            assert engine.pushes == step - 1  # the update before this step's rollout, none at the start
            rollouts.updated()
    assert engine.pushes == 2


def test_a_push_that_fails_is_a_rollout_error_before_the_next_step_with_nothing_in_flight():
    engine = Engine(fail_at=2)
    with Rollouts(collector(), engine, POLICY, one_step_off=False) as rollouts:
        rollouts.take(1, 5)
        rollouts.updated()
        rollouts.take(2, 5)
        rollouts.updated()
        with pytest.raises(RolloutError, match="collective_rpc failed"):
            rollouts.take(3, 5)
        assert rollouts.state() is None


def test_one_step_off_each_update_is_pushed_once_before_the_next_collection():
    engine = Engine()
    with Rollouts(collector(), engine, POLICY, one_step_off=True) as rollouts:
        for step in (1, 2, 3):
            assert rollouts.take(step, 3).step == step
            # step 2's batch is collected from the weights the engine started with, step 3's after update 1
            assert engine.pushes == step - 1 if step < 3 else 1
            rollouts.updated()
    assert engine.pushes == 1


def test_one_step_off_a_failed_push_keeps_the_batch_taken_in_flight():
    engine = Engine(fail_at=1)
    with Rollouts(collector(), engine, POLICY, one_step_off=True) as rollouts:
        rollouts.take(1, 5)  # step 2's batch is collected from the weights the engine started with
        rollouts.updated()
        with pytest.raises(RolloutError, match="collective_rpc failed"):
            rollouts.take(2, 5)  # step 2's batch was collected; the push before step 3's collection fails
        state = rollouts.state()
        assert state["step"] == 2 and state["version"] == 0 and state["collected"].step == 2


def test_one_step_off_a_failed_collection_leaves_nothing_in_flight():
    with Rollouts(collector(fail_at=2), Engine(), POLICY, one_step_off=True) as rollouts:
        rollouts.take(1, 5)
        rollouts.updated()
        with pytest.raises(RolloutError, match="completions failed"):
            rollouts.take(2, 5)
        assert rollouts.state() is None
