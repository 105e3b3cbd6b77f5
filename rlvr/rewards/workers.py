"""The worker processes rewards use, owned by the run that uses them: the maths checker's symbolic worker,
the code reward's judge pool and the worker that runs user rewards under rewards.isolate.

A run (rlvr.train.grpo.train) enters `owned_by_run()`: the rewards it calls find that run's workers
through `current()`, and they are closed when it ends, so two runs in one process (two `rlvr.fit`
calls in a notebook) share no process, state or restart count. A reward called outside any run (a
bare `math_accuracy(...)`, `rlvr eval`, `rlvr audit`) uses the process's own set, started on first use.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class Workers:
    """Each worker made on first use (under a lock: the reward's threads race here), closed by close()."""

    def __init__(self):
        self._lock = threading.Lock()
        self._maths = self._judge = self._user = None

    @property
    def maths(self):
        """The maths checker's symbolic worker (rlvr.rewards.maths.worker.SymbolicWorker)."""
        with self._lock:
            if self._maths is None:
                from rlvr.rewards.maths.worker import SymbolicWorker

                self._maths = SymbolicWorker()
            return self._maths

    @property
    def judge(self):
        """The code reward's test-code workers (rlvr.rewards.code.judge.JudgePool)."""
        with self._lock:
            if self._judge is None:
                from rlvr.rewards.code.judge import JudgePool

                self._judge = JudgePool()
            return self._judge

    @property
    def user(self):
        """The worker that runs user reward functions under rewards.isolate (rlvr.rewards.isolated)."""
        with self._lock:
            if self._user is None:
                from rlvr.rewards.isolated import IsolatedRewards

                self._user = IsolatedRewards()
            return self._user

    @property
    def maths_restarts(self) -> int:
        """How many times this set's symbolic worker was killed and replaced (0 before its first use)."""
        return self._maths.restarts if self._maths is not None else 0

    def close(self) -> None:
        with self._lock:
            made, self._maths, self._judge, self._user = (self._maths, self._judge, self._user), None, None, None
        for worker in made:
            if worker is not None:
                worker.close()


_process = Workers()
_active: Workers | None = None


def current() -> Workers:
    """The running run's workers, else the process's own."""
    return _active if _active is not None else _process


@contextmanager
def owned_by_run():
    """A fresh set of workers for one run, made current while it runs and closed when it ends."""
    global _active
    outer, mine = _active, Workers()
    _active = mine
    try:
        yield mine
    finally:
        _active = outer
        mine.close()
