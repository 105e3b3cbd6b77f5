"""User reward functions in a worker process of their own (rewards.isolate): a call that hangs past
rewards.timeout_s is killed with its process group, and os._exit, a segfault or a reward that kills its
own process cost that call (a failure: its completions score 0), never the trainer. The next call
starts a fresh worker.

The worker is `python -m rlvr.rewards.isolated_worker`, in a session of its own (a Ctrl-C at the terminal
reaches the trainer, which decides), with the trainer's environment, working directory and import path,
and its stderr (what the reward prints appears; its stdout goes to stderr too, since the protocol has
the real one). Frames are pickles with an 8-byte length, in both directions: user code is trusted, only
fallible. A function crosses as a recipe the worker can rebuild (rlvr.rewards.base.recipe_of).
"""
from __future__ import annotations

import builtins
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time

from rlvr.errors import RlvrError
from rlvr.rewards.call import CallTimedOut, RewardLog, waiting_on_user_code
from rlvr.sandbox.worker import kill_session

STARTUP_S = 60.0
_HEADER = struct.Struct(">Q")


class WorkerCrashed(Exception):
    """The worker process ended during a call."""


# ---------------------------------------------------------------- frames, both sides

def read_frame(f):
    head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    return pickle.loads(f.read(_HEADER.unpack(head)[0]))


def write_frame(f, obj) -> None:
    data = pickle.dumps(obj)
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


# ---------------------------------------------------------------- the trainer's side

def _rebuilt(kind: str, args: tuple, trace: str) -> Exception:
    """The worker's exception as one of the same builtin type where there is one (so a TypeError's
    missing parameter is still read by rlvr.rewards.preflight), with the worker's traceback as a note."""
    cls = getattr(builtins, kind, None)
    try:
        e = cls(*args) if isinstance(cls, type) and issubclass(cls, Exception) else None
    except Exception:  # noqa: BLE001 - a builtin that takes other arguments
        e = None
    if e is None:  # the user's own type, or SystemExit and the like: an Exception of the same name
        e = type(kind, (Exception,), {"__module__": "rlvr.rewards.isolated_worker"})(*args)
    e.add_note("in the reward worker process:\n" + trace.rstrip())
    return e


class IsolatedRewards:
    """One worker process, started on first use and after a kill; one call at a time."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.restarts = 0  # killed for overrunning, or found dead
        self._lock = threading.Lock()

    def call(self, recipe: tuple, completions: list, columns: dict, shared: dict, timeout_s: float):
        """(what the function returned, its RewardLog) or (the exception: the function's own,
        CallTimedOut past timeout_s (0: no limit), or WorkerCrashed, None)."""
        with self._lock:
            if self.proc is None:
                self._start()
            request = {"recipe": recipe, "completions": completions, "columns": columns, "shared": shared}
            try:
                write_frame(self.proc.stdin, request)
            except (OSError, ValueError):  # died since the last call
                self._kill()
                return WorkerCrashed("the reward worker process had ended"), None
            try:
                with waiting_on_user_code():
                    reply = self._read(timeout_s)
            except BaseException:  # a stop signal ended the wait: the worker's reply would answer the next call
                self._kill()
                raise
            if isinstance(reply, BaseException):
                return reply, None
        if "error" in reply:
            return _rebuilt(*reply["error"]), None
        log = RewardLog(reply["metrics"], reply["extras"])
        return reply["result"], log

    def close(self) -> None:
        with self._lock:
            if self.proc is not None:
                self._kill(count=False)

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.rewards.isolated_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)
        ready = self._read(STARTUP_S)
        if ready != "ready":
            raise RlvrError(f"rewards.isolate: the reward worker process did not start ({ready})")

    def _read(self, timeout_s: float):
        """The next frame, or CallTimedOut / WorkerCrashed with the worker killed."""
        deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        poll = select.poll()
        poll.register(self.proc.stdout, select.POLLIN)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if poll.poll(None if left is None else int(left * 1000) + 1):
                break
            if deadline is not None and time.monotonic() >= deadline:
                self._kill()
                return CallTimedOut(timeout_s)
        try:
            frame = read_frame(self.proc.stdout)
        except Exception:  # noqa: BLE001 - a torn frame is a worker that died writing it
            frame = None
        if frame is None:
            try:
                code = self.proc.wait(timeout=5)  # it closed its end: it is ending
            except subprocess.TimeoutExpired:
                code = None
            self._kill()
            how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else
                   f"exit code {code}: os._exit or a crash")
            return WorkerCrashed(f"the reward worker process ended during the call ({how})")
        return frame

    def _kill(self, count: bool = True) -> None:
        kill_session(self.proc)
        self.proc = None
        self.restarts += count
