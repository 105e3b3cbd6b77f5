"""Where each step's batch comes from (rollout.overlap).

none: a step collects its batch (prompts, rollouts, rewards) first, from the weights its update then
trains, and the engine takes the updated weights just before it collects the next batch (on-policy,
lag 0). Taken there rather than right after the update, a push that fails (a vLLM server that died
during the update) fails with the policy exactly as the last logged step left it, which the loop can
checkpoint; and the last step's update is never pushed for nothing.

one_step_off: while step k's update runs on the main thread, a background thread collects step k+1's
batch from the engine's weights as they were before that update; step k+1 then trains on a batch one
update old (rollout/policy_lag = 1), and the engine takes the policy's weights just before it starts
collecting the next batch. The engine must sample from weights the update does not touch: a snapshot
(builtin/hf, rlvr/rollout/quant.py) or its own copy (vLLM). Only the collecting thread draws prompts
and calls the reward functions, one step after another, so the prompt sampler sees the order it sees
synchronously.

    with Rollouts(collect, engine, policy, one_step_off=..., updates=done) as rollouts:
        for step in ...:
            collected = rollouts.take(step, last)  # one step off: the batch collected during the last
            ...update...                           # update, and step+1's collection started
            rollouts.updated()                     # the policy took an optimizer step

A checkpoint holds the batch in flight (`state`), so a resumed run trains on what it would have. A
collection or push that fails raises RolloutError, after which `state` still describes the policy as the
last finished step left it (a failed collection's batch is dropped; a batch collected before a failed
push is kept in flight), so the run can be checkpointed there.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.errors import RlvrError
from rlvr.train.state import Collected


class RolloutError(RlvrError):
    """A step's batch could not be collected or the engine could not take the weights (a vLLM server that
    refused, died or hung): the policy has not moved since the last finished step."""


@dataclass
class Pending:
    step: int  # the step that will train on it
    version: int  # the optimizer steps the sampling weights had taken
    future: Future


class Rollouts:
    """`collect(step)` -> that step's batch; `engine` samples it and holds weights `sync` sets from
    `policy`, which has taken `updates` optimizer steps; `pending`: a checkpoint's batch in flight."""

    def __init__(self, collect: Callable[[int], Collected], engine, policy: torch.nn.Module, *,
                 one_step_off: bool, updates: int = 0, pending: dict | None = None):
        self.collect, self.engine, self.policy, self.one_step_off = collect, engine, policy, one_step_off
        self.updates = updates  # optimizer steps the policy has taken
        self.synced = updates  # optimizer steps the engine's weights have taken (a resumed engine was synced)
        self.pending: Pending | None = None
        self.pushed: dict[str, float] = {}  # this step's pushes to the engine (rollout/sync_bytes, rollout/sync_s)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-rollout") if one_step_off else None
        if pending is not None and one_step_off:
            done = Future()
            done.set_result(pending["collected"])
            self.pending = Pending(pending["step"], pending["version"], done)

    def __enter__(self) -> Rollouts:
        return self

    def __exit__(self, *exc) -> None:
        """Wait for a collection still running (its batch is dropped) and end the thread."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def take(self, step: int, last_step: int) -> Collected:
        """Step `step`'s batch; one step off, also start collecting step+1's (unless `step` is the last)."""
        t0 = time.perf_counter()
        try:
            if self.pending is not None and self.pending.step == step:
                try:
                    collected, version = self.pending.future.result(), self.pending.version
                except BaseException:
                    self.pending = None  # nothing in flight to checkpoint
                    raise
            else:  # synchronous, or the first step of a run
                self.sync()
                collected, version = self._collect(step), self.synced
            waited = time.perf_counter() - t0
            if self.one_step_off and step < last_step:
                self.sync()  # if this fails, the batch just taken stays in flight (`state`)
                self.pending = Pending(step + 1, self.synced, self.pool.submit(self._collect, step + 1))
            else:
                self.pending = None
        except RolloutError:
            raise
        except RlvrError as e:
            raise RolloutError(str(e)) from e
        collected.metrics["rollout/policy_lag"] = self.updates - version
        collected.metrics.update(self.pushed)
        self.pushed = {}
        if self.one_step_off:
            took = collected.metrics["time/collect_s"]
            collected.metrics["time/rollout_wait_s"] = waited
            collected.metrics["time/overlap_frac"] = min(max(1 - waited / took, 0.0), 1.0) if took > 0 else 0.0
        return collected

    def _collect(self, step: int) -> Collected:
        t0 = time.perf_counter()
        collected = self.collect(step)
        collected.metrics["time/collect_s"] = time.perf_counter() - t0
        return collected

    def updated(self) -> None:
        """The policy took an optimizer step; the engine takes it before it samples again (`take`)."""
        self.updates += 1

    def sync(self) -> None:
        """The engine takes the policy's weights, unless it holds them already; what an engine with weights of its
        own (vLLM) was sent, and how long that took, go in this step's metrics."""
        if self.synced != self.updates:
            t0 = time.perf_counter()
            pushed = self.engine.sync_weights(self.policy)
            if pushed is not None:
                self.pushed = {"rollout/sync_bytes": self.pushed.get("rollout/sync_bytes", 0) + pushed,
                               "rollout/sync_s": self.pushed.get("rollout/sync_s", 0.0) + time.perf_counter() - t0}
            self.synced = self.updates

    def state(self) -> dict | None:
        """The batch in flight, waited for (a checkpoint's "pending"), or None."""
        if self.pending is None:
            return None
        return {"step": self.pending.step, "version": self.pending.version, "collected": self.pending.future.result()}
