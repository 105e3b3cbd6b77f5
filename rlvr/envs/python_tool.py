"""A "python" tool: run model-written code in the project's sandbox and answer with what it prints.

The code runs through rlvr.sandbox.run.run_harness in the harness's stdio mode (the program runs
as __main__ under bubblewrap, rlimits and a wall clock), exactly as the stdio code tests run a
candidate. The sandbox only runs the program; what the answer is (output, truncation, the failure
reason) is decided here on the returned bytes and exit status.
"""
from __future__ import annotations

from rlvr.envs.tools import Tool, ToolError
from rlvr.sandbox.run import Sandbox, SandboxLimits, launcher, run_harness

MAX_OUTPUT_CHARS = 2000     # the answer's length; the caller caps tokens as well
TRUNCATED = "\n[truncated]"
NO_OUTPUT = "(no output: print() the values you want to see)"   # an empty answer reads as a failure
# Short: the model waits on each call inside a rollout. stdout above 64 KiB is a flood, not an answer.
DEFAULT_LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, stdout_bytes=64 * 1024)
_DOC = """Run a Python 3 program in a sandbox and return what it prints to stdout.

Args:
    code: The complete program. It has no network and no files of yours, and is stopped after
        {wall:g} seconds; print() the results you want to see.
"""


def make_python_tool(limits: SandboxLimits | None = None, sandbox: Sandbox | None = None) -> Tool:
    """The "python" tool (one argument, code: str). Refuses now, with SandboxUnavailable, when
    bubblewrap is missing and unsafe mode is off: that is the operator's problem, not the model's."""
    limits = limits or DEFAULT_LIMITS
    sandbox = sandbox or Sandbox()
    launcher(sandbox, limits)

    def python(code: str) -> str:
        return run_python(code, limits, sandbox)

    python.__doc__ = _DOC.format(wall=limits.wall_s)
    return Tool.from_function(python, name="python", concurrent=True)   # each call its own sandbox


def run_python(code: str, limits: SandboxLimits, sandbox: Sandbox) -> str:
    """The program's stdout, trailing whitespace removed and capped at MAX_OUTPUT_CHARS; ToolError
    with the sandbox's reason (time-out, memory limit, the exception's last traceback line) when
    it did not exit cleanly."""
    result = run_harness({"kind": "stdio", "source": code}, None, limits, sandbox)
    failure = result.failure(limits)
    if failure is not None:
        raise ToolError(failure.why)
    out = result.stdout.decode("utf-8", "replace").rstrip()
    if not out:
        return NO_OUTPUT
    return out if len(out) <= MAX_OUTPUT_CHARS else out[:MAX_OUTPUT_CHARS] + TRUNCATED

