"""The parent's side of a serving sandbox: one sandboxed process per program, many calls over pipes.

Starting a sandbox costs tens of milliseconds; a call over a pipe costs well under one. So a program
is loaded once and every function call the tests make is shipped in as plain data and answered
with plain data (rlvr.sandbox.harness), in batches where the calls are known in advance.
"""
from __future__ import annotations

import os
import selectors
import subprocess

from rlvr.sandbox import harness
from rlvr.sandbox.clock import RunClock
from rlvr.sandbox.outcome import LIMIT, PROGRAM, TIMEOUT, Failure, compile_failure, exit_reason
from rlvr.sandbox.run import Sandbox, SandboxLimits, spawn

_REPLY_TAGS = {"v": 2, "e": 4, "n": 2, "m": 1}   # tag -> length of a well-formed reply
_EXIT_WAIT_S = 0.2


def _described(line, tag: str) -> bool:
    """line is [tag, type, builtin base, message], all strings."""
    return type(line) is list and len(line) == 4 and line[0] == tag and all(type(x) is str for x in line[1:])


def _load_reason(type_name: str, base: str, message: str) -> str:
    if base == "MemoryError":
        return "memory limit"
    return "crashed: " + (f"{type_name}: {message}" if message else type_name)


def _well_formed(reply) -> bool:
    # the tag may be anything the program wrote: a list is unhashable, so check its type first
    if type(reply) is not list or not reply or type(reply[0]) is not str or reply[0] not in _REPLY_TAGS:
        return False
    if len(reply) != _REPLY_TAGS[reply[0]]:
        return False
    return reply[0] != "e" and reply[0] != "n" or all(type(x) is str for x in reply[1:])


class Program:
    """Load `source` in a fresh sandbox; `call` ships calls in and returns their replies.

    A reply is ["v", value], ["e", type, builtin base, message], ["n", type], ["m"], or, once the
    sandbox has ended (crashed, timed out, flooded), ["x", why, kind] for every call from then on
    (`ended`, a Failure: its kind decided here, rlvr.sandbox.run). `load_error` ([type, builtin base,
    message]) and `load_failure` (a Failure) are set when the program did not compile or load. The run's
    wall clock covers the program's whole life, and `limits.channel_bytes` caps everything read from the sandbox over that life (not per
    line: decoded replies are held until judged, and `[[],[],...]` decodes to ~20x its size).
    """

    def __init__(self, source: str, limits: SandboxLimits, sandbox: Sandbox):
        self.limits = limits
        self.ended: Failure | None = None
        self.load_error: list | None = None
        self.load_failure: Failure | None = None
        self._buf = bytearray()
        self._received = 0
        req_r, self._req = os.pipe()
        self._resp, resp_w = os.pipe()
        try:
            self.run = spawn({"source": source}, [str(req_r), str(resp_w)], limits, sandbox,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, pass_fds=(req_r, resp_w))
        except BaseException:
            for fd in (self._req, self._resp):
                os.close(fd)
            raise
        finally:
            os.close(req_r)
            os.close(resp_w)   # ours must go, or end-of-file never comes
        os.set_blocking(self._req, False)
        self.clock = RunClock(self.run.proc.pid, limits.wall_s, self.run.started)  # load-free (rlvr.sandbox.clock)
        # the compile status comes before any of the program runs, so only it decides syntax_error
        status = self._reply()
        first = self._reply() if status == ["compiled"] else status
        if status == ["compiled"] and _described(first, "load"):
            self.load_error = first[1:]
            self.load_failure = Failure(LIMIT if first[2] == "MemoryError" else PROGRAM,
                                        _load_reason(*first[1:]))
        elif status != ["compiled"] and _described(status, "syntax"):
            self.load_error = status[1:]
            self.load_failure = compile_failure(*status[1:])
        elif first != ["ready"]:
            self._end(first)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, calls: list) -> list:
        """calls: [[name, encoded args, encoded kwargs], ...] -> one reply each, in order."""
        if self.ended is None and self.load_error is None:
            line = ('[' + ",".join(harness.json.dumps(c, separators=(",", ":")) for c in calls)
                    + ']\n').encode("ascii")
            if self._send(line):
                replies = []
                for _ in calls:
                    reply = self._reply()
                    if reply is None or not _well_formed(reply):
                        self._end(reply)
                        break
                    replies.append(reply)
                if len(replies) == len(calls):
                    return replies
                return replies + [["x", self.ended.why, self.ended.kind]] * (len(calls) - len(replies))
        ended = self.ended or self.load_failure or Failure(PROGRAM, "the program did not load")
        return [["x", ended.why, ended.kind]] * len(calls)

    def close(self) -> None:
        for fd in (self._req, self._resp):
            try:
                os.close(fd)
            except OSError:
                pass
        oom = self.run.finish()
        if oom and self.ended is not None:
            self.ended = Failure(LIMIT, "memory limit (whole run)")

    # ---- internals ------------------------------------------------------------------------------

    def _end(self, reply) -> None:
        """The sandbox can answer no more: say why, once."""
        if self.ended is not None:
            return
        if reply is not None:
            self.ended = Failure(LIMIT, "malformed answer from the sandbox")
        elif self._received > self.limits.channel_bytes:  # said first: it does not depend on the clock
            self.ended = Failure(LIMIT, "output too large")
        elif self.clock.left() <= 0:
            self.ended = Failure(TIMEOUT, f"timed out after {self.limits.wall_s:.1f}s")
        else:
            try:   # it has closed the pipe; give it a moment to exit so the exit code says why
                self.run.proc.wait(_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            rc = self.run.proc.returncode
            self.ended = (exit_reason(rc, "", self.limits) if rc else None) or \
                Failure(LIMIT, "no result (the program exited before reporting)")
        if self.run.cgroup is not None and self.run.cgroup.oom_killed():
            self.ended = Failure(LIMIT, "memory limit (whole run)")
        self.run.finish()

    def _send(self, data: bytes) -> bool:
        view = memoryview(data)
        with selectors.DefaultSelector() as sel:
            sel.register(self._req, selectors.EVENT_WRITE)
            while view:
                left = self.clock.left()
                if left <= 0 or not sel.select(left):
                    if left > 0:
                        continue   # the wall limit passed while the machine kept it waiting: look again
                    self._end(None)
                    return False
                try:
                    view = view[os.write(self._req, view):]
                except BlockingIOError:
                    continue
                except OSError:          # the sandbox closed its end: it is gone
                    self._end(None)
                    return False
        return True

    def _reply(self):
        """The next line, decoded (typed plain data); None at end-of-file, past the deadline or
        past the channel cap; a line that does not decode, or nests deeper than a call may return,
        counts as malformed (not None)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._resp, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                if self._received > self.limits.channel_bytes:
                    return None
                left = self.clock.left()
                if left <= 0 or not sel.select(left):
                    if left > 0:
                        continue
                    return None
                chunk = os.read(self._resp, 1 << 16)
                if not chunk:
                    return None
                self._received += len(chunk)
                self._buf += chunk
        i = self._buf.index(b"\n")
        line = bytes(self._buf[:i])
        del self._buf[:i + 1]
        try:
            return harness.loads(line, max_depth=harness.MAX_DEPTH + 1)   # ["v", value]
        except ValueError:
            return ["malformed"]
