"""A time limit that does not depend on what else the machine runs.

A wall clock makes a verdict depend on the load: on a machine running eight other jobs an honest program
that needs 0.5 s of CPU takes 2 s of wall time waiting for a CPU, and fails "timed out". `RunClock`
counts, instead, the wall time a process tree would have taken on an idle machine: the wall time since
it started less the time its threads spent runnable but waiting for a CPU (the kernel's run-queue delay,
/proc/PID/task/TID/schedstat). A program that sleeps or waits on input accrues no run-queue delay, so it
is still stopped at the limit; one that computes is stopped when its CPU time (and any sleeping) reaches
it, however long the machine made it wait. A wall backstop (BACKSTOP x the limit) bounds the
extension on a machine so loaded that nothing runs.

Where schedstat cannot be read (another kernel, another user's process) the delay reads 0: the clock is
then the wall clock, as before.
"""
from __future__ import annotations

import os
import time

BACKSTOP = 10.0   # the wall clock may stretch to this many times the limit when the machine is starved
_NS = 1e-9
_STEP = 0.02      # past the wall limit, the tree is looked at no more often than this


def _descendants(pid: int) -> list[int]:
    """pid and every process below it (bubblewrap's --new-session leaves the program in another
    process group, so the tree is walked by /proc/PID/task/TID/children)."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                continue
    return found


def run_queue_delay(pid: int) -> dict[tuple[int, int], float]:
    """Seconds each thread of pid's process tree has waited for a CPU, by (pid, tid)."""
    delays = {}
    for p in _descendants(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    delays[(p, int(tid))] = int(f.read().split()[1]) * _NS
            except (OSError, ValueError, IndexError):
                continue
    return delays


class RunClock:
    """Seconds a process tree has used of `limit_s` as an idle machine would have counted them (module
    docstring). `started` is the tree's start on time.monotonic(); threads already running then (a
    persistent worker) count only the delay they accrue after it."""

    def __init__(self, pid: int | None, limit_s: float, started: float | None = None):
        self.pid, self.limit_s = pid, limit_s
        self.started = time.monotonic() if started is None else started
        self._base = run_queue_delay(pid) if pid is not None else {}
        self._seen: dict[tuple[int, int], float] = {}

    def delay(self) -> float:
        """Run-queue delay the tree accrued since it started (threads that ended keep what was last seen)."""
        if self.pid is not None:
            for key, d in run_queue_delay(self.pid).items():
                self._seen[key] = d - self._base.get(key, 0.0)
        return sum(self._seen.values())

    def left(self) -> float:
        """Seconds until the limit may be reached (0: it is). Reads /proc only once the wall clock has
        passed the limit: before that the idle-machine time is below the limit too."""
        wall = time.monotonic() - self.started
        if wall < self.limit_s:
            return self.limit_s - wall
        backstop = self.limit_s * BACKSTOP - wall
        if backstop <= 0:
            return 0.0
        left = min(self.limit_s - (wall - self.delay()), backstop)
        return 0.0 if left <= 0 else max(left, _STEP)
