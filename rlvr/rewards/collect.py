"""Reading a sandboxed run's pipes to caps under a wall clock, and killing what is left of it."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

_STDERR_TAIL = 8192
_DRAIN_GRACE_S = 0.5   # after the program exits, how long its pipes may take to drain


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


def collect(proc: subprocess.Popen, wall_s: float, stdout_cap: int, started: float):
    """Read stdout, stderr and the result pipe until the program has exited and its pipes are
    drained, the wall clock runs out, or a cap is passed. The group is dead when this returns.

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
    deadline, exited_at = started + wall_s, None
    timed_out = too_large = False
    try:
        while not too_large and (exited_at is None or any(fd in caps for fd in sel.get_map())):
            now = time.monotonic()
            if exited_at is None and exited(proc.pid):
                exited_at = now
                kill_group(proc.pid)  # leftovers holding our pipes open die now
                continue
            end = deadline if exited_at is None else exited_at + _DRAIN_GRACE_S
            if now >= end:
                timed_out = exited_at is None
                break
            wait = end - now if pidfd is not None else min(end - now, 0.01)
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
