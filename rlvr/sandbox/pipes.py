"""Reading a sandboxed run's pipes to caps under a wall clock, and killing what is left of it."""
from __future__ import annotations

import ctypes
import os
import select
import selectors
import signal
import subprocess
import threading
import time

from rlvr.sandbox.clock import RunClock

_STDERR_TAIL = 8192
_DRAIN_GRACE_S = 0.5   # after the program exits, how long its pipes may take to drain
_REAP_WAIT_S = 0.5     # how long an orphaned sandbox process may take to die before we reap it
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_started: set[int] = set()   # bubblewrap processes we started and have not reaped: not orphans
_started_lock = threading.Lock()


def exited(pid: int) -> bool:
    """Has pid exited? WNOWAIT leaves the zombie in place, so its pid (and process group id)
    cannot be reused before we have killed the group."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def kill_group(pid: int) -> None:
    """SIGKILL cannot be caught or ignored; the group holds every descendant that stayed in it,
    and in bwrap mode killing bwrap ends the pid namespace, which takes the rest."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_until_exit(proc: subprocess.Popen, wall_s: float, stdout_cap: int, started: float):
    """Read stdout, stderr and the result pipe until the program has exited and its pipes are
    drained, its time runs out (wall_s on rlvr.sandbox.clock's load-free clock), or a cap is passed. The
    group is dead when this returns.

    Returns (stdout, stderr tail, timed_out, output_too_large).
    """
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: stdout_cap, err_fd: None}
    bufs = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        sel.register(fd, selectors.EVENT_READ)
    pidfd = open_pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)  # readable once the process exits
    clock, exited_at = RunClock(proc.pid, wall_s, started), None
    timed_out = too_large = False
    try:
        while not too_large and (exited_at is None or any(fd in caps for fd in sel.get_map())):
            now = time.monotonic()
            if exited_at is None and exited(proc.pid):
                exited_at = now
                kill_group(proc.pid)  # leftovers holding our pipes open die now
                continue
            left = clock.left() if exited_at is None else exited_at + _DRAIN_GRACE_S - now
            if left <= 0:
                timed_out = exited_at is None
                break
            wait = left if pidfd is not None else min(left, 0.01)
            too_large = _read_ready(sel.select(wait), sel, bufs, caps, pidfd)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        kill_group(proc.pid)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out, too_large


def _read_ready(events, sel, bufs: dict, caps: dict, pidfd: int | None) -> bool:
    """Read what is ready into bufs; True when a capped buffer went over its cap."""
    too_large = False
    for key, _ in events:
        if key.fd == pidfd:
            sel.unregister(pidfd)  # it stays readable; the loop now sees the exit itself
            continue
        chunk = os.read(key.fd, 1 << 16)
        if not chunk:
            sel.unregister(key.fd)
            continue
        buf, cap = bufs[key.fd], caps[key.fd]
        buf += chunk
        if cap is None:
            del buf[:-_STDERR_TAIL]     # stderr: only its end matters (the last line)
        elif len(buf) > cap:
            del buf[cap:]               # read at most the cap; the flood is a failure
            too_large = True
    return too_large


def open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python < 3.9 or Linux < 5.3: poll instead
        return None


# ---- orphans --------------------------------------------------------------------------------------
# bwrap's outer process can end before its child (the pid namespace's init, which --die-with-parent
# then ends): on a normal exit it reports the status and goes, and a kill ends it first. The orphan
# goes to the nearest subreaper or to init: the trainer itself where it runs as PID 1 (a container
# without an init), which never waited for it, so without this one zombie per program run would pile up.


def popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen for a bubblewrap process, registered as ours until `done(proc)`: the
    orphan reaper leaves it to the code that waits for it."""
    with _started_lock:
        proc = subprocess.Popen(argv, **kwargs)
        _started.add(proc.pid)
    return proc


def done(proc: subprocess.Popen) -> None:
    """proc has been waited for; then reap whatever of the sandbox was orphaned to us."""
    with _started_lock:
        _started.discard(proc.pid)
    reap_orphans()


def become_reaper() -> None:
    """Take the orphans of our sandboxes ourselves (a judge worker does: left to go up to the
    trainer, they would wait there for its next reaping)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reaper() -> bool:
    """Do orphans come to us (PID 1, or a child subreaper)?"""
    flag = ctypes.c_int(0)
    return os.getpid() == 1 or (_prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
                                and flag.value != 0)


def _orphans() -> list[int]:
    """pidfds on our children named bwrap that we did not start (call with _started_lock held)."""
    pids = set()
    for tid in os.listdir("/proc/self/task"):   # an orphan may go to any of our threads
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    fds = []
    for pid in pids - _started:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "bwrap":
                    continue
        except OSError:
            continue
        fd = open_pidfd(pid)   # names this process, however its pid is reused after
        if fd is not None:
            fds.append(fd)
    return fds


def reap_orphans(wait_s: float = _REAP_WAIT_S) -> None:
    """Reap sandbox processes orphaned to us, each once it has died (it is dying already)."""
    if not _reaper():
        return
    with _started_lock:
        fds = _orphans()
    deadline = time.monotonic() + wait_s
    for fd in fds:
        try:
            poll = select.poll()   # readable once it has exited
            poll.register(fd, select.POLLIN)
            poll.poll(max(0, int((deadline - time.monotonic()) * 1000)))
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
        except (ChildProcessError, OSError):   # another thread reaped it first
            pass
        finally:
            os.close(fd)
