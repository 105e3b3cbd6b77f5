"""Tool schemas from functions, tools from an environment object, parsing calls, running them."""
from typing import Optional

import pytest

from rlvr.envs.tools import (MAX_CALL_CHARS, Tool, ToolCall, ToolError, execute, parse_docstring,
                             parse_tool_calls, template_supports_tools, tool_prompt, tools_from_object)


# ---- schemas -----------------------------------------------------------------------------------

def search(query: str, limit: int, scale: float = 1.0, exact: bool = False, tags: list[str] = None,
           filters: dict = None, after: Optional[int] = None) -> str:
    """Search the notes for a query,
    ranked by relevance.

    A second paragraph that is not part of the description.

    Args:
        query: What to look for.
        limit (int): How many results to return; the
            rest are dropped.
        scale: A weight.
        exact: Match whole words only.
        tags: Only notes with these tags.
        filters: Field -> value.
        after: Only notes after this id.

    Returns:
        The results, one a line.
    """
    return query


def test_schema_from_google_docstring():
    assert Tool.from_function(search).schema() == {"type": "function", "function": {
        "name": "search",
        "description": "Search the notes for a query, ranked by relevance.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {"type": "integer", "description": "How many results to return; the rest are dropped."},
            "scale": {"type": "number", "description": "A weight."},
            "exact": {"type": "boolean", "description": "Match whole words only."},
            "tags": {"type": "array", "description": "Only notes with these tags."},
            "filters": {"type": "object", "description": "Field -> value."},
            "after": {"type": "integer", "nullable": True, "description": "Only notes after this id."},
        }, "required": ["query", "limit"]}}}


def add(a: int, b: "float | None" = None) -> float:
    """Add two numbers.

    :param a: The first
        number.
    :param float b: The second number.
    :returns: the sum.
    """
    return a + (b or 0)


def test_schema_from_rest_docstring_and_a_name():
    tool = Tool.from_function(add, name="plus")
    assert (tool.name, tool.description, tool.fn) == ("plus", "Add two numbers.", add)
    assert tool.parameters == {"type": "object", "properties": {
        "a": {"type": "integer", "description": "The first number."},
        "b": {"type": "number", "nullable": True, "description": "The second number."},
    }, "required": ["a"]}


def test_schema_without_docstring():
    def ping(host: str):
        return host
    assert Tool.from_function(ping).parameters == {
        "type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}
    assert Tool.from_function(ping).description == ""


def test_parse_docstring_stops_the_args_section_at_the_next_section():
    doc = "Do it.\n\nArgs:\n    x: The x.\n\nRaises:\n    ValueError: never.\n"
    assert parse_docstring(doc) == ("Do it.", {"x": "The x."})


def varargs(*items: str) -> str:
    return ""


def kwargs(**options: str) -> str:
    return ""


def positional(x: int, /) -> int:
    return x


def unannotated(x) -> int:
    return x


def odd_type(x: set) -> int:
    return 0


@pytest.mark.parametrize("fn, message", [
    (varargs, "tool function varargs (FILE:83) has parameter 'items' that cannot be passed by name"),
    (kwargs, "tool function kwargs (FILE:87) has parameter 'options' that cannot be passed by name"),
    (positional, "tool function positional (FILE:91) has parameter 'x' that cannot be passed by name"),
    (unannotated, "parameter 'x' of tool function unannotated (FILE:95) has no type hint"),
    (odd_type, "parameter 'x' of tool function odd_type (FILE:99) has type <class 'set'>; a tool parameter must be str"),
])
def test_from_function_refuses(fn, message):
    """Each refusal names the function, its file and the line it starts on."""
    with pytest.raises(ValueError) as info:
        Tool.from_function(fn)
    assert str(info.value).startswith(message.replace("FILE", __file__))


# ---- tools from an environment object ----------------------------------------------------------

class Counter:
    def __init__(self):
        self.count = 0
        self.reads = 0

    def reset(self) -> str:
        self.count = 0
        return ""

    def get_reward(self) -> float:
        return float(self.count)

    def increment(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    @staticmethod
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    def _helper(self, x: int) -> int:
        return x

    def __len__(self):
        return self.count

    @property
    def value(self) -> int:
        self.reads += 1
        return self.count

    label = "not a method"


def test_tools_from_object():
    env = Counter()
    tools = tools_from_object(env)
    assert [t.name for t in tools] == ["double", "increment"]
    assert tools[1].parameters == {"type": "object", "required": ["by"],
                                   "properties": {"by": {"type": "integer", "description": "How much to add."}}}
    assert execute({t.name: t for t in tools}, ToolCall("increment", {"by": 3})) == ("3", "")
    assert env.count == 3                     # bound to env
    assert env.reads == 0                     # the property was never run


# ---- parsing calls -----------------------------------------------------------------------------

CALC = '{"name": "calculator", "arguments": {"expression": "23*47"}}'


def test_parse_one_call():
    text = f"Let me compute.\n<tool_call>{CALC}</tool_call>"
    assert parse_tool_calls(text) == [ToolCall("calculator", {"expression": "23*47"})]


def test_parse_whitespace_newlines_and_several():
    text = (f"<tool_call>\n  {CALC}\n</tool_call> and then "
            '<tool_call>{"name": "python",\n "arguments": {"code": "print(1)"}}</tool_call>')
    assert parse_tool_calls(text) == [ToolCall("calculator", {"expression": "23*47"}),
                                      ToolCall("python", {"code": "print(1)"})]


def test_parse_no_calls():
    assert parse_tool_calls("The answer is 1081. </tool_call>") == []


@pytest.mark.parametrize("body, call", [
    ('{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}',
     ToolCall("calculator", {"expression": "1+1"})),                          # arguments as a JSON string
    ('{"name": "now"}', ToolCall("now", {})),
    ('{"name": "calculator", "arguments": {"expression": "1+1"', ToolCall(
        "", {}, "tool call is not valid JSON: Expecting ',' delimiter: line 1 column 57 (char 56)")),
    ("[1, 2]", ToolCall("", {}, 'tool call must be a JSON object: {"name": ..., "arguments": {...}}')),
    ('{"arguments": {}}', ToolCall("", {}, 'tool call has no "name" (a non-empty string)')),
    ('{"name": 3}', ToolCall("", {}, 'tool call has no "name" (a non-empty string)')),
    ('{"name": "f", "arguments": [1]}', ToolCall("f", {}, '"arguments" must be a JSON object')),
    ('{"name": "f", "arguments": "[1]"}', ToolCall("f", {}, '"arguments" must be a JSON object')),
    ('{"name": "f", "arguments": "x=1"}', ToolCall("f", {}, '"arguments" is a string that is not a JSON object')),
    ("[" * 1500 + "]" * 1500, ToolCall("", {}, f"tool call longer than {MAX_CALL_CHARS} characters")),
])
def test_parse_malformed(body, call):
    assert parse_tool_calls(f"<tool_call>{body}</tool_call>") == [call]


def test_parse_deep_json_within_the_size_bound_does_not_raise():
    [call] = parse_tool_calls("<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>")
    assert call.name == "" and call.error   # RecursionError or "not an object": either way an error call


def test_parse_unclosed():
    text = f"<tool_call>{CALC}</tool_call><tool_call>{CALC}"
    assert parse_tool_calls(text) == [
        ToolCall("calculator", {"expression": "23*47"}),
        ToolCall("calculator", {}, "unclosed <tool_call>: end the call with </tool_call>")]
    assert parse_tool_calls("<tool_call>{") == [
        ToolCall("", {}, "unclosed <tool_call>: end the call with </tool_call>")]


def test_parse_too_many():
    calls = parse_tool_calls(f"<tool_call>{CALC}</tool_call>" * 6)
    assert calls[:4] == [ToolCall("calculator", {"expression": "23*47"})] * 4
    assert calls[4:] == [ToolCall("", {}, "too many tool calls in one turn (the limit is 4)")] * 2


# ---- running calls -----------------------------------------------------------------------------

def divide(a: int, b: float, note: str = "") -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a / b


def broken(x: int) -> str:
    """Always fails."""
    return {}["missing"]


def listing(flag: bool) -> list:
    """A list."""
    return [1, {"a": "é"}]


def silent(x: int) -> str:
    """Fails without a message."""
    raise ToolError()


TOOLS = {t.name: t for t in map(Tool.from_function, (divide, broken, listing, silent, add))}


@pytest.mark.parametrize("call, outcome", [
    (ToolCall("divide", {"a": 7, "b": 2}), ("3.5", "")),
    (ToolCall("divide", {"a": 7, "b": 2.5}), ("2.8", "")),
    (ToolCall("listing", {"flag": True}), ('[1, {"a": "é"}]', "")),
    (ToolCall("add", {"a": 1, "b": None}), ("1", "")),                      # nullable
    (ToolCall("add", {"a": None}), ("", "argument 'a' of tool 'add' must be an integer, got a null")),
    (ToolCall("nope", {}), ("", "unknown tool 'nope'; available: add, broken, divide, listing, silent")),
    (ToolCall("divide", {"a": 1}), ("", "missing required argument 'b' for tool 'divide'")),
    (ToolCall("divide", {"a": 1, "b": 2, "c": 3}),
     ("", "unexpected argument 'c' for tool 'divide'; expected: a, b, note")),
    (ToolCall("divide", {"a": "1", "b": 2}),
     ("", "argument 'a' of tool 'divide' must be an integer, got a string")),
    (ToolCall("divide", {"a": True, "b": 2}),
     ("", "argument 'a' of tool 'divide' must be an integer, got a boolean")),
    (ToolCall("divide", {"a": 1.5, "b": 2}),
     ("", "argument 'a' of tool 'divide' must be an integer, got a number")),
    (ToolCall("divide", {"a": 1, "b": [2]}),
     ("", "argument 'b' of tool 'divide' must be a number, got an array")),
    (ToolCall("listing", {"flag": 1}),
     ("", "argument 'flag' of tool 'listing' must be a boolean, got an integer")),
    (ToolCall("divide", {"a": 1, "b": 0}), ("", "cannot divide by zero")),
    (ToolCall("silent", {"x": 1}), ("", "tool 'silent' failed")),
    (ToolCall("broken", {"x": 1}), ("", "tool 'broken' raised KeyError: 'missing'")),
    (ToolCall("divide", {}, "tool call is not valid JSON: x"), ("", "tool call is not valid JSON: x")),
])
def test_execute(call, outcome):
    assert execute(TOOLS, call) == outcome


def test_execute_with_no_tools():
    assert execute({}, ToolCall("x", {})) == ("", "unknown tool 'x'; available: (none)")


# ---- prompting ---------------------------------------------------------------------------------

def test_tool_prompt():
    def echo(text: str) -> str:
        """Echo text."""
        return text
    assert tool_prompt([Tool.from_function(echo)]) == (
        "You may call one or more tools to help with the task. The tools, as JSON schemas:\n<tools>\n"
        '{"type": "function", "function": {"name": "echo", "description": "Echo text.", "parameters": '
        '{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}\n'
        "</tools>\nTo call a tool, write a JSON object with its name and arguments inside tags:\n"
        '<tool_call>\n{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "At most 4 calls per turn. The results come back in the next message.")


class Tok:
    def __init__(self, chat_template):
        self.chat_template = chat_template


QWEN_LIKE = ("{%- if tools %}<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>"
             "<tool_call>{%- endif %}{% for m in messages %}{{ m.content }}{% endfor %}")


@pytest.mark.parametrize("tok, supported", [
    (Tok(QWEN_LIKE), True),
    (Tok({"default": "{{ messages }}", "tool_use": QWEN_LIKE}), True),
    (Tok("{% for m in messages %}{{ m.content }}{% endfor %}"), False),
    (Tok("{% if tools %}{{ tools | tojson }}{% endif %}"), False),     # tools, but another call format
    (Tok(None), False),
    (object(), False),
])
def test_template_supports_tools(tok, supported):
    assert template_supports_tools(tok) is supported


def test_the_tool_pools_idle_threads_are_not_named_leftovers_at_exit():
    """A run whose model called a tool leaves the shared pool's threads idle: the exit of `rlvr` does not
    name them as threads left running by loaded code (it did, after every tools run); a tool still running
    at the exit is named, and the exit does not wait for it."""
    import re
    import subprocess
    import sys

    script = ("import sys, threading, time\nfrom rlvr.envs import tools\nfrom rlvr.cli import exit_leaving_threads\n"
              "assert [tools._CALLS.submit(lambda: 1).result() for _ in range(3)] == [1, 1, 1]\n"
              "if sys.argv[1] == 'hung':\n    started = threading.Event()\n"
              "    tools._CALLS.submit(lambda: (started.set(), time.sleep(60)))\n    started.wait()\n"
              "exit_leaving_threads(0)\nprint('exited as the interpreter does')\n")
    idle = subprocess.run([sys.executable, "-c", script, "idle"], capture_output=True, text=True, timeout=60)
    assert idle.returncode == 0 and "exiting without waiting" not in idle.stderr, idle.stderr
    assert idle.stdout == "exited as the interpreter does\n"
    hung = subprocess.run([sys.executable, "-c", script, "hung"], capture_output=True, text=True, timeout=30)
    assert hung.returncode == 0 and hung.stdout == ""
    assert re.search(r"rlvr: exiting without waiting for 1 thread\(s\) left running by loaded code \(tool-calls_\d+\)",
                     hung.stderr), hung.stderr
