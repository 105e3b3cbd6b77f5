"""Stopping a run cleanly: SIGINT or SIGTERM lets the step finish and a checkpoint be written (rlvr/train/grpo.py
reads `signal` after each step)."""
from __future__ import annotations

import signal
import threading

from rlvr.report.console import say
from rlvr.rewards.call import StopWaiting, waits_on_user_code


class StopOnSignal:
    """SIGINT / SIGTERM ask the loop to stop after the current step; a second SIGINT abandons it. One that
    arrives while the main thread waits on user code (rlvr.rewards.call.waits_on_user_code: a reward
    that hangs) stops the run now instead: StopWaiting out of that wait, the step dropped.
    `checkpoint`: whether the stop writes one (train.save_every=0 writes none)."""

    def __init__(self, checkpoint: bool = True):
        self.signal: str | None = None
        self.checkpoint = checkpoint
        self._old = {}

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        if waits_on_user_code():  # a reward that hangs would hold the stop for up to rewards.timeout_s
            say(f"{self.signal}: stopping now: this step waits on user code (a reward call that has not "
                "returned), so it is dropped" + ("; the steps done are checkpointed" if self.checkpoint else ""))
            raise StopWaiting(self.signal)
        say(f"{self.signal}: finishing step, " + ("writing a checkpoint, " if self.checkpoint else "")
            + "then exiting (SIGINT again to abandon)")

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
