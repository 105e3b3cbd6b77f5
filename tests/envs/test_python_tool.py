"""The sandboxed python tool: output, truncation, and each failure as the model sees it. Runs in the
real sandbox, as tests/rewards/test_code.py does (bubblewrap is a test requirement)."""
from dataclasses import replace
from pathlib import Path

import pytest

from rlvr.envs.python_tool import DEFAULT_LIMITS, MAX_OUTPUT_CHARS, NO_OUTPUT, make_python_tool
from rlvr.envs.tools import ToolCall, ToolError, execute
from rlvr.sandbox import run as sandbox
from rlvr.sandbox.run import Sandbox, SandboxUnavailable
from tests.conftest import returns_within

LIMIT_S = 1.0
LIMITS = replace(DEFAULT_LIMITS, wall_s=LIMIT_S, cpu_s=LIMIT_S)


def run(code: str) -> str:
    return make_python_tool(LIMITS).fn(code=code)   # the sandbox probe is cached after the first


def failure(code: str) -> str:
    with pytest.raises(ToolError) as info:
        run(code)
    return str(info.value)


def test_schema():
    assert make_python_tool().schema() == {"type": "function", "function": {
        "name": "python",
        "description": "Run a Python 3 program in a sandbox and return what it prints to stdout.",
        "parameters": {"type": "object", "required": ["code"], "properties": {"code": {
            "type": "string",
            "description": "The complete program. It has no network and no files of yours, and is stopped "
                           "after 5 seconds; print() the results you want to see."}}}}}


def test_output():
    assert run("print(2**10)") == "1024"
    assert run("for i in range(3):\n    print(i * i)\n") == "0\n1\n4"
    assert run("x = 1") == NO_OUTPUT


def test_long_output_is_truncated():
    assert MAX_OUTPUT_CHARS == 2000
    assert run("print('ab' * 1000)") == "ab" * 1000                  # exactly 2000: whole
    assert run("print('x' * 5000)") == "x" * 2000 + "\n[truncated]"


@pytest.mark.slow
def test_infinite_loop_stops_at_the_time_limit():
    # RLIMIT_CPU and the wall clock race for a busy loop: either one stopping it is the limit (a busy loop runs
    # on its CPU time, rlvr.sandbox.clock: the wall clock stretches on a loaded machine, up to the backstop)
    message = returns_within(60, failure, "while True:\n    pass")
    assert message in ("timed out after 1.0s", "cpu time limit")
    assert failure("import time\ntime.sleep(60)") == "timed out after 1.0s"


def test_exception_gives_its_last_traceback_line():
    assert failure("print('before')\nraise ValueError('boom')") == "crashed: ValueError: boom"
    assert failure("1/0") == "crashed: ZeroDivisionError: division by zero"
    assert failure("def f(:\n    pass") == "crashed: SyntaxError: invalid syntax"


def test_host_files_are_out_of_reach():
    repo_file = Path(__file__).resolve()
    assert failure("import os\nprint(os.listdir('/root'))") == \
        "crashed: FileNotFoundError: [Errno 2] No such file or directory: '/root'"
    assert failure(f"print(open({str(repo_file)!r}).read())") == \
        f"crashed: FileNotFoundError: [Errno 2] No such file or directory: {str(repo_file)!r}"


def test_memory_limit():
    assert failure("x = bytearray(4 * 1024 ** 3)") == "memory limit"


def test_through_execute():
    tools = {"python": make_python_tool(LIMITS)}
    assert execute(tools, ToolCall("python", {"code": "print(sum(range(10)))"})) == ("45", "")
    assert execute(tools, ToolCall("python", {"code": "raise KeyError('k')"})) == ("", "crashed: KeyError: 'k'")
    assert execute(tools, ToolCall("python", {"source": "print(1)"})) == \
        ("", "missing required argument 'code' for tool 'python'")


def test_missing_bubblewrap_is_refused_when_the_tool_is_made(monkeypatch):
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        make_python_tool(sandbox=Sandbox(bwrap="/nonexistent/bwrap"))
