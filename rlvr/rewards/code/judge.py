"""Test code in a separate process that can be killed, so the trainer receives only verdicts.

An assert spec's test code is trusted (rlvr.rewards.code.checks), but it runs on the candidate's replies,
which are hostile plain data: `set(f(x)) == {4, 5}` over a list of hash-colliding integers is
quadratic, holds the GIL and, run in the trainer, would have no time limit. So a check of one
program (its sandbox session and every test on its replies) runs in a worker process, and the parent
gives the whole check a wall clock: a worker that overruns it is killed (its sandbox dies with it,
bubblewrap's --die-with-parent) and the program fails "timed out". Workers are persistent, one check
at a time each, started on demand: a process per check would cost more than it saves (the pool
is measured by bench/sandbox_overhead.py).

Run as `python -m rlvr.rewards.code.judge` (the parent does this).
"""
from __future__ import annotations

import functools
import json
import os
import select
import signal
import subprocess
import sys
import threading

WORKER_MEMORY_BYTES = 4 * 1024 ** 3   # test code on a 4 MiB reply needs far less; a runaway stops here
STARTUP_S = 60.0


# ---------------------------------------------------------------- the worker (child side)

@functools.lru_cache(maxsize=256)
def _spec(text: str):
    from rlvr.rewards.code.spec import parse_spec

    return parse_spec(text)


def check(request: dict) -> dict:
    """One program's check: {"outcomes": [[passed, why], ...]}, {"failure": why} for the program as
    a whole, or {"spec_error": message} when the spec cannot be decided (the dataset's problem)."""
    from rlvr.rewards.code.checks import UndecidableSpec
    from rlvr.rewards.code.reward import CodeTestsConfig, session_outcomes
    from rlvr.sandbox.run import Sandbox, SandboxLimits

    cfg = CodeTestsConfig(request["partial"], SandboxLimits(**request["limits"]), Sandbox(**request["sandbox"]))
    try:
        return {"outcomes": session_outcomes(request["program"], _spec(request["tests"]), cfg)}
    except UndecidableSpec as e:
        return {"spec_error": str(e)}
    except MemoryError:
        return {"failure": "memory limit (test code)"}
    except Exception as e:  # noqa: BLE001 - whatever one program caused is that program's failure
        return {"failure": f"checker error: {type(e).__name__}"}


def serve() -> None:
    import resource

    from rlvr.sandbox import pipes

    # set here, not in a preexec_fn: the pool starts workers from the trainer's threads (rlvr.sandbox.launcher)
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    pipes.become_reaper()
    # The protocol moves to descriptors of its own: test code that prints or reads input() must
    # not write into it or read requests from it.
    requests, out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    out.write("ready\n")
    out.flush()
    for line in requests:
        out.write(json.dumps(check(json.loads(line)), ensure_ascii=True) + "\n")
        out.flush()


# ---------------------------------------------------------------- the pool (parent side)

class JudgePool:
    """Persistent workers; `check` takes an idle one (or starts one) for one program's check."""

    def __init__(self):
        self._idle: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self.killed = 0   # workers killed for overrunning their check or dying (tests read it)

    def check(self, request: dict, timeout_s: float) -> dict:
        proc = self._take()
        try:
            proc.stdin.write((json.dumps(request, ensure_ascii=True) + "\n").encode("ascii"))
            proc.stdin.flush()
            line = _readline(proc, timeout_s)
        except OSError:        # it died between checks
            line = None
        if line is None:
            crashed = proc.poll() is not None
            self._kill(proc)
            return {"failure": "checker crashed" if crashed else
                    f"timed out after {timeout_s:.1f}s (the whole check, test code included)"}
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self._kill(proc)
            return {"failure": "checker crashed"}
        with self._lock:
            self._idle.append(proc)
        return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for proc in idle:
            self._kill(proc)

    def _take(self) -> subprocess.Popen:
        with self._lock:
            while self._idle:
                proc = self._idle.pop()
                if proc.poll() is None:
                    return proc
                self._kill(proc)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.Popen([sys.executable, "-m", "rlvr.rewards.code.judge"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        if _readline(proc, STARTUP_S) != b"ready":
            self._kill(proc)
            raise RuntimeError("the code reward's test-code worker (rlvr.rewards.code.judge) did not start")
        return proc

    def _kill(self, proc: subprocess.Popen) -> None:
        from rlvr.sandbox import cgroup, pipes

        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            f.close()
        self.killed += 1
        pipes.reap_orphans()   # its sandbox, where it was orphaned to us
        cgroup.remove_left_by(proc.pid)


def _readline(proc: subprocess.Popen, timeout_s: float) -> bytes | None:
    poll = select.poll()   # not select.select: a trainer may hold descriptors past FD_SETSIZE
    poll.register(proc.stdout, select.POLLIN)
    if not poll.poll(max(0, int(timeout_s * 1000))):
        return None
    line = proc.stdout.readline()
    return line.strip() if line.endswith(b"\n") else None


_shared: JudgePool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> JudgePool:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = JudgePool()
        return _shared


if __name__ == "__main__":
    serve()
