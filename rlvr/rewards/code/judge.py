"""Test code in a separate process that can be killed, so the trainer receives only verdicts.

An assert spec's test code is trusted (rlvr.rewards.code.checks), but it runs on the candidate's replies,
which are hostile plain data: `set(f(x)) == {4, 5}` over a list of hash-colliding integers is
quadratic, holds the GIL and, run in the trainer, would have no time limit. So a check of one
program (its sandboxed program and every test on its replies) runs in a worker process, and the parent
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
import threading

from rlvr.sandbox.outcome import LIMIT, PROGRAM, TIMEOUT
from rlvr.sandbox.worker import KillableWorker

WORKER_MEMORY_BYTES = 4 * 1024 ** 3   # test code on a 4 MiB reply needs far less; a runaway stops here
STARTUP_S = 60.0


# ---------------------------------------------------------------- the worker (child side)

@functools.lru_cache(maxsize=256)
def _spec(text: str):
    from rlvr.rewards.code.spec import parse_spec

    return parse_spec(text)


def check(request: dict) -> dict:
    """One program's check: {"outcomes": [[passed, why, kind], ...]}, {"failure": why, "kind": kind} for
    the program as a whole, or {"spec_error": message} when the spec cannot be decided (the dataset's
    problem). kind: "" for a pass, else one of rlvr.sandbox.run's FAILURE_KINDS."""
    from rlvr.rewards.code.checks import UndecidableSpec
    from rlvr.rewards.code.outcomes import CodeTestsConfig, program_outcomes
    from rlvr.sandbox.limits import Sandbox, SandboxLimits

    cfg = CodeTestsConfig(partial=request["partial"], limits=SandboxLimits(**request["limits"]),
                          sandbox=Sandbox(**request["sandbox"]))
    try:
        return {"outcomes": program_outcomes(request["program"], _spec(request["tests"]), cfg)}
    except UndecidableSpec as e:
        return {"spec_error": str(e)}
    except MemoryError:
        return {"failure": "memory limit (test code)", "kind": LIMIT}
    except Exception as e:  # noqa: BLE001 - whatever one program caused is that program's failure
        return {"failure": f"checker error: {type(e).__name__}", "kind": PROGRAM}


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
    """Persistent workers (rlvr.sandbox.worker); `check` takes an idle one (or starts one) for one
    program's check."""

    def __init__(self):
        self._idle: list[KillableWorker] = []
        self._lock = threading.Lock()
        self.killed = 0   # workers killed for overrunning their check or dying (tests read it)

    def check(self, request: dict, timeout_s: float) -> dict:
        worker = self._take()
        reply, failure = worker.ask(request, timeout_s)
        if reply is None:   # ask killed it
            self._killed(worker)
            if failure == "crashed":
                return {"failure": "checker crashed", "kind": LIMIT}
            return {"failure": f"timed out after {timeout_s:.1f}s (the whole check, test code included)",
                    "kind": TIMEOUT}
        with self._lock:
            self._idle.append(worker)
        return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
            self._killed(worker)

    def _take(self) -> KillableWorker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
                self._killed(worker)
        worker = KillableWorker("rlvr.rewards.code.judge", "the code reward's test-code worker", STARTUP_S)
        try:
            worker.start()
        except RuntimeError:
            self._killed(worker)
            raise
        return worker

    def _killed(self, worker: KillableWorker) -> None:
        """After a worker was killed: reap its sandbox where it was orphaned to us, and its cgroups."""
        from rlvr.sandbox import cgroup, pipes

        self.killed += 1
        pipes.reap_orphans()
        cgroup.remove_left_by(worker.last_pid)


if __name__ == "__main__":
    serve()
