"""A time limit that does not depend on what else the machine runs.

A wall clock makes a verdict depend on the load: on a machine running eight other jobs an honest program
that needs 0.5 s of CPU takes 2 s of wall time waiting for a CPU, and fails "timed out". `RunClock`
counts, instead, the wall time a process tree would have taken on an idle machine: the wall time since
it started less the time its threads spent runnable but waiting for a CPU (the kernel's run-queue delay,
/proc/PID/task/TID/schedstat). A program that sleeps or waits on input accrues no run-queue delay, so it
is still stopped at the limit; one that computes is stopped when its CPU time (and any sleeping) reaches
it, however long the machine made it wait. A wall backstop (BACKSTOP x the limit) bounds the
extension on a machine so loaded that nothing runs.

The delay is summed over the tree's threads, so a program can make it for itself: eight processes that
spin wait for each other's CPUs, and 0.9 s of every wall second is some thread's delay, which would
stretch a 1 s limit to the backstop, every core the machine has busy all the while. So the clock also
counts the tree's CPU time divided by the CPUs it may use: no machine runs that in less wall time, and
no waiting for a CPU shortens it. A single thread's CPU time is never more than its wall time less its
delay, so this bound moves no honest single-threaded program's limit. The CPU time is read per process
with what its reaped children used (/proc/PID/stat), so processes that spin briefly and exit between
two looks are counted too.

Where schedstat cannot be read (another kernel, another user's process) the delay reads 0: the clock is
then the wall clock, as before.
"""
from __future__ import annotations

import math
import os
import time

BACKSTOP = 10.0   # the wall clock may stretch to this many times the limit when the machine is starved
_NS = 1e-9
_STEP = 0.02      # past the wall limit, the tree is looked at no more often than this
_TICK = 1.0 / os.sysconf("SC_CLK_TCK")   # /proc/PID/stat counts CPU time in clock ticks


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


def tree_cpu(pid: int) -> float:
    """CPU seconds used by pid's process tree: each live process's own (all its threads, ended ones
    included) and its reaped children's. A process that ends is reaped by one in the tree (its parent,
    or the sandbox's init), whose children's count then holds it, so the sum never drops."""
    total = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()   # after the name, which may hold anything
            total += sum(int(x) for x in fields[11:15])        # utime, stime, cutime, cstime
        except (OSError, ValueError, IndexError):
            continue
    return total * _TICK


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may run on: its affinity, or fewer under a CPU quota at the root of its cgroup
    tree (a container's `--cpus`: cgroup v2's cpu.max, v1's cpu.cfs_quota_us)."""
    cpus = len(os.sched_getaffinity(0))
    v2 = (_read(f"{cgroup_root}/cpu.max") or "").split()
    quota, period = v2 if len(v2) == 2 else (_read(f"{cgroup_root}/cpu/cpu.cfs_quota_us"),
                                             _read(f"{cgroup_root}/cpu/cpu.cfs_period_us"))
    try:
        if int(quota) > 0:   # "max" (v2) or -1 (v1): no quota
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (TypeError, ValueError):
        pass
    return cpus


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class RunClock:
    """Seconds a process tree has used of `limit_s` as an idle machine would have counted them (module
    docstring). `started` is the tree's start on time.monotonic(); threads already running then (a
    persistent worker) count only the delay they accrue after it."""

    def __init__(self, pid: int | None, limit_s: float, started: float | None = None):
        self.pid, self.limit_s = pid, limit_s
        self.started = time.monotonic() if started is None else started
        self._base = run_queue_delay(pid) if pid is not None else {}
        self._seen: dict[tuple[int, int], float] = {}
        self._cpu_base = tree_cpu(pid) if pid is not None else 0.0

    def delay(self) -> float:
        """Run-queue delay the tree accrued since it started (threads that ended keep what was last seen)."""
        if self.pid is not None:
            for key, d in run_queue_delay(self.pid).items():
                self._seen[key] = d - self._base.get(key, 0.0)
        return sum(self._seen.values())

    def cpu(self) -> float:
        """CPU seconds the tree used since it started, on all its CPUs together."""
        return tree_cpu(self.pid) - self._cpu_base if self.pid is not None else 0.0

    def left(self) -> float:
        """Seconds until the limit may be reached (0: it is). Reads /proc only once the wall clock has
        passed the limit: before that the idle-machine time is below the limit too."""
        wall = time.monotonic() - self.started
        if wall < self.limit_s:
            return self.limit_s - wall
        backstop = self.limit_s * BACKSTOP - wall
        if backstop <= 0:
            return 0.0
        idle = max(wall - self.delay(), self.cpu() / usable_cpus())   # the module docstring says why both
        left = min(self.limit_s - idle, backstop)
        return 0.0 if left <= 0 else max(left, _STEP)
