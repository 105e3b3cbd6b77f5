"""What a sandboxed run came to: its RunResult (output, exit status, what the parent's clock and caps saw) and,
when it failed as a whole, a Failure whose kind the parent decides from what it saw itself, never from what
the program wrote."""
from __future__ import annotations

import signal
from dataclasses import dataclass

from rlvr.sandbox.limits import SandboxLimits


TIMEOUT, LIMIT, SYNTAX, PROGRAM = "timeout", "sandbox_error", "syntax_error", "wrong"
FAILURE_KINDS = (TIMEOUT, LIMIT, SYNTAX, PROGRAM)


@dataclass(frozen=True)
class Failure:
    """Why a sandboxed run failed: `kind` (one of FAILURE_KINDS) decided by the parent from what it saw
    itself (its clock, its caps, the cgroup, the exit status, the harness's compile status), for metrics;
    `why` the words people read, which nothing parses. timeout: wall clock or CPU limit; sandbox_error: a
    limit or an abnormal end (memory, output size, a signal, no or malformed answer); syntax_error: the
    program did not compile; wrong: the program itself failed (raised, exited non-zero)."""

    kind: str
    why: str


@dataclass(kw_only=True, frozen=True)
class RunResult:
    stdout: bytes
    stderr_tail: str
    exit_code: int | None
    timed_out: bool
    output_too_large: bool
    wall_s: float
    oom_killed: bool = False   # the run's cgroup went over its memory
    compile_error: list | None = None   # [type, builtin base, message] when the program did not compile

    def failure(self, limits: SandboxLimits) -> Failure | None:
        """Why the run failed as a whole, or None when it exited cleanly."""
        return exit_reason(self.exit_code, self.stderr_tail, limits, self.timed_out,
                           self.output_too_large, self.oom_killed, self.compile_error)


def exit_reason(exit_code: int | None, stderr_tail: str, limits: SandboxLimits, timed_out: bool = False,
                too_large: bool = False, oom_killed: bool = False,
                compile_error: list | None = None) -> Failure | None:
    """Why a run failed as a whole, or None when it exited cleanly. The kind comes from what the parent saw
    (its clock and caps, the cgroup, the exit status, the harness's compile status), save a MemoryError
    under the address-space limit, which shows only as the stderr's last line."""
    if oom_killed:   # first: what follows from it (a time-out, a crash) says less
        return Failure(LIMIT, "memory limit (whole run)")
    if too_large:
        return Failure(LIMIT, "output too large")
    if timed_out:
        return Failure(TIMEOUT, f"timed out after {limits.wall_s:.1f}s")
    last = next((ln.strip() for ln in reversed(stderr_tail.splitlines()) if ln.strip()), "")
    if compile_error is not None:   # the kind from the status; the words, as for any crash, from the traceback
        failure = compile_failure(*compile_error)
        return Failure(SYNTAX, f"crashed: {last[:200]}") if failure.kind == SYNTAX and last else failure
    rc = exit_code or 0
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0   # bwrap reports a signal as 128 + n
    if "MemoryError" in last:   # the address-space limit shows only as the traceback's last line; a
        # program that prints one itself moves a metric, never its score
        return Failure(LIMIT, "memory limit")
    if sig == signal.SIGXCPU:
        return Failure(TIMEOUT, "cpu time limit")
    if rc and not last and sig in signal.valid_signals():
        return Failure(LIMIT, f"crashed: killed by {signal.Signals(sig).name}")
    if rc:
        return Failure(PROGRAM, f"crashed: {last[:200]}" if last else f"crashed: exit code {rc}")
    return None


def compile_failure(type_name: str, base: str, message: str) -> Failure:
    """The harness's compile status (written before any of the program ran) as a Failure."""
    why = "crashed: " + (f"{type_name}: {message}" if message else type_name)
    return Failure(LIMIT, "memory limit") if base == "MemoryError" else Failure(SYNTAX, why[:209])
