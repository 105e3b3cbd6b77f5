"""One killable worker process: `python -m MODULE` in a session of its own, answering one JSON line per
request line. The maths checker's symbolic worker and the code reward's judge workers both run as one;
the parent gives each request a wall clock and kills the whole process group past it (SIGKILL cannot be
caught), so hostile input costs that request, never the trainer."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from rlvr.sandbox.clock import RunClock


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL to every process of `proc`'s session (it was started with start_new_session: whatever it forked
    goes too), then reap it and close the pipes to it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        f.close()


class KillableWorker:
    """A child process that writes `ready` when it has started, then one JSON reply per request.
    Not thread-safe: each caller holds its own lock (a pool hands a worker to one check at a time)."""

    def __init__(self, module: str, what: str, startup_s: float = 60.0):
        self.module, self.what, self.startup_s = module, what, startup_s
        self.proc: subprocess.Popen | None = None
        self.last_pid: int | None = None   # the newest child's pid, kept after a kill (its cgroups name it)

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen([sys.executable, "-m", self.module], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        self.last_pid = self.proc.pid
        if self._readline(RunClock(None, self.startup_s)) != b"ready":
            self.kill()
            raise RuntimeError(f"{self.what} ({self.module}) did not start")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ask(self, request: dict, timeout_s: float) -> tuple[dict | None, str]:
        """(reply, "") within timeout_s, else (None, "crashed" | "timed out") with the worker killed. The
        limit is on the load-free clock of rlvr.sandbox.clock (the time the worker's process tree would have
        taken on an idle machine; the wall clock is its backstop). A reply that is not a JSON object is a
        crash: the worker is not trusted to be sane."""
        try:
            self.proc.stdin.write((json.dumps(request, ensure_ascii=True) + "\n").encode("ascii"))
            self.proc.stdin.flush()
        except OSError:   # it died since the last request
            self.kill()
            return None, "crashed"
        line = self._readline(RunClock(self.proc.pid, timeout_s))  # load-free: rlvr.sandbox.clock
        if line is None:
            crashed = self.proc.poll() is not None
            self.kill()
            return None, "crashed" if crashed else "timed out"
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.kill()
            return None, "crashed"
        return reply, ""

    def kill(self) -> None:
        """SIGKILL to the worker's process group, then reap it; a no-op when none is running."""
        if self.proc is not None:
            kill_session(self.proc)
            self.proc = None

    def _readline(self, clock: RunClock) -> bytes | None:
        poll = select.poll()   # not select.select: a trainer may hold descriptors past FD_SETSIZE (1024)
        poll.register(self.proc.stdout, select.POLLIN)
        while not poll.poll(int(clock.left() * 1000) + 1):
            if clock.left() <= 0:
                return None
        line = self.proc.stdout.readline()
        return line.strip() if line.endswith(b"\n") else None
