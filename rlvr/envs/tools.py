"""Tools a model can call in its text: schemas from Python functions, parsing calls, running them.

A tool is a plain function; its signature and Google- or reST-style docstring give the JSON schema
the chat template shows the model (the OpenAI / Hugging Face `tools=[...]` format). The model calls
it in the Hermes / Qwen tag form

    <tool_call>{"name": "calculator", "arguments": {"expression": "23*47"}}</tool_call>

and the environment answers with the result. Everything here is pure and never raises on model
text: a malformed call becomes a ToolCall carrying an error, and `execute` turns every failure of
a call into an error string the model sees in the next turn.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import re
import time
import types
import typing
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable

MAX_CALLS = 4               # calls run per turn; each further <tool_call> becomes an error call
MAX_CALL_CHARS = 2000       # a tag body longer than this is refused before json.loads sees it
OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
SKIPPED_METHODS = ("reset", "get_reward")   # TRL environment_factory: the rest are tools
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array",
               dict: "object"}
_ARGS_HEADERS = ("Args:", "Arguments:", "Parameters:")
_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")            # "Returns:", "Raises:", ...
_GOOGLE_ARG = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


class ToolError(Exception):
    """Raised by a tool for an error the model should see (its message is the tool's answer)."""


# ---- tools and their schemas -------------------------------------------------------------------

@dataclass(kw_only=True, frozen=True)
class Tool:
    """A callable the model may use. parameters is a JSON schema object:
    {"type": "object", "properties": {...}, "required": [...]}."""

    name: str
    description: str
    parameters: dict
    fn: Callable = field(repr=False)
    concurrent: bool = False   # stateless: its calls may run alongside others (`run_calls`)

    @classmethod
    def from_function(cls, fn: Callable, name: str | None = None, concurrent: bool = False) -> "Tool":
        """The schema from fn's signature (type hints) and docstring (summary and Args). Refuses
        *args, **kwargs, positional-only and unannotated parameters with ValueError: the model
        calls with a JSON object of named arguments, and each needs a type to be shown."""
        name = name or fn.__name__
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        try:
            hints = typing.get_type_hints(fn)
        except (NameError, TypeError) as e:   # a string annotation naming something undefined
            raise ValueError(f"cannot read the type hints of tool function {fn.__qualname__}: {e}") from None
        properties, required = {}, []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise ValueError(f"tool function {fn.__qualname__} has parameter {p.name!r} that cannot "
                                 "be passed by name (*args, **kwargs or positional-only); "
                                 "a tool takes named parameters only")
            if p.name not in hints:
                raise ValueError(f"parameter {p.name!r} of tool function {fn.__qualname__} has no type "
                                 "hint; annotate it with str, int, float, bool, list or dict")
            prop = json_type(hints[p.name], f"parameter {p.name!r} of {fn.__qualname__}")
            if p.name in arg_docs:
                prop["description"] = arg_docs[p.name]
            properties[p.name] = prop
            if p.default is p.empty:
                required.append(p.name)
        return cls(name=name, description=summary, fn=fn, concurrent=concurrent,
                   parameters={"type": "object", "properties": properties, "required": required})

    def schema(self) -> dict:
        """The OpenAI / Hugging Face tools entry (what apply_chat_template(tools=[...]) takes)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


def json_type(hint, where: str) -> dict:
    """{"type": ...} for str/int/float/bool/list/dict (bare or parametrised, like list[int]);
    Optional[X] / X | None adds "nullable": True, as Hugging Face's get_json_schema does."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return {**json_type(rest[0], where), "nullable": True}
    base = typing.get_origin(hint) or hint
    if base not in _JSON_TYPES:
        raise ValueError(f"{where} has type {hint!r}; a tool parameter must be str, int, float, "
                         "bool, list or dict (or Optional of one)")
    return {"type": _JSON_TYPES[base]}


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary, {parameter: description}) from a cleaned docstring. The summary is the first
    paragraph joined into one line; parameters come from a Google `Args:` section or from reST
    `:param x:` lines, continuation lines joined with spaces."""
    lines = doc.splitlines()
    first = []
    for line in lines:
        if not line.strip() or line.strip() in _ARGS_HEADERS or line.lstrip().startswith(":param"):
            break
        first.append(line.strip())
    return " ".join(first), {**_rest_params(lines), **_google_args(lines)}


def _google_args(lines: list[str]) -> dict[str, str]:
    start = next((i for i, ln in enumerate(lines) if ln.strip() in _ARGS_HEADERS), None)
    if start is None:
        return {}
    header_indent, entry_indent, docs, current = _indent(lines[start]), None, {}, None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent and _SECTION.match(line.strip()):
            break
        entry_indent = indent if entry_indent is None else entry_indent
        m = _GOOGLE_ARG.match(line.strip())
        if indent == entry_indent and m:
            current = m.group(1)
            docs[current] = m.group(2).strip()
        elif indent > entry_indent and current is not None:
            docs[current] = (docs[current] + " " + line.strip()).strip()
        else:
            break
    return docs


def _rest_params(lines: list[str]) -> dict[str, str]:
    docs, current = {}, None
    for line in lines:
        m = _REST_PARAM.match(line.strip())
        if m:
            current = m.group(1)
            docs[current] = m.group(2).strip()
        elif current is not None and line.strip() and line[:1].isspace() and not line.strip().startswith(":"):
            docs[current] = (docs[current] + " " + line.strip()).strip()
        else:
            current = None
    return docs


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def tools_from_object(obj) -> list[Tool]:
    """Every public method of obj's class except reset and get_reward (TRL's environment_factory
    convention), bound to obj, sorted by name. Looked up statically, so no property runs."""
    tools = []
    for name in sorted(dir(type(obj))):
        if name.startswith("_") or name in SKIPPED_METHODS:
            continue
        static = inspect.getattr_static(type(obj), name)
        if inspect.isfunction(static) or isinstance(static, (staticmethod, classmethod)):
            tools.append(Tool.from_function(getattr(obj, name), name=name))
    return tools


# ---- calls in the model's text -----------------------------------------------------------------

@dataclass
class ToolCall:
    """One <tool_call> tag. error is non-empty when the tag could not be read as a call (the
    model is told why instead of the tool running)."""

    name: str
    arguments: dict
    error: str = ""


def parse_tool_calls(text: str) -> list[ToolCall]:
    """One ToolCall per <tool_call> tag, in order; never raises. Past MAX_CALLS, calls are not
    decoded and carry "too many tool calls in one turn"; an unclosed tag ends the scan."""
    calls, pos = [], 0
    while (start := text.find(OPEN_TAG, pos)) != -1:
        body_start = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, body_start)
        if len(calls) >= MAX_CALLS:
            calls.append(ToolCall("", {}, f"too many tool calls in one turn (the limit is {MAX_CALLS})"))
        else:
            body = text[body_start:] if end == -1 else text[body_start:end]
            call = decode_call(body)
            if end == -1:
                call = ToolCall(call.name, {}, f"unclosed {OPEN_TAG}: end the call with {CLOSE_TAG}")
            calls.append(call)
        if end == -1:
            break
        pos = end + len(CLOSE_TAG)
    return calls


def decode_call(body: str) -> ToolCall:
    """A tag's body as a call: {"name": str, "arguments": object or a JSON string of one}."""
    body = body.strip()
    if len(body) > MAX_CALL_CHARS:
        return ToolCall("", {}, f"tool call longer than {MAX_CALL_CHARS} characters")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as e:   # RecursionError: deep nesting within the bound
        return ToolCall("", {}, f"tool call is not valid JSON: {e}")
    if not isinstance(data, dict):
        return ToolCall("", {}, 'tool call must be a JSON object: {"name": ..., "arguments": {...}}')
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", {}, 'tool call has no "name" (a non-empty string)')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):   # some models send the arguments object JSON-encoded
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return ToolCall(name, {}, '"arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, '"arguments" must be a JSON object')
    return ToolCall(name, arguments)


# ---- running a call ----------------------------------------------------------------------------

def execute(tools: dict[str, Tool], call: ToolCall) -> tuple[str, str]:
    """(result text, "") or ("", error text). Never raises for anything a tool or the model does:
    a ToolError's message or "tool 'x' raised Type: message" becomes the error."""
    if call.error:
        return "", call.error
    tool = tools.get(call.name)
    if tool is None:
        return "", f"unknown tool {call.name!r}; available: {', '.join(sorted(tools)) or '(none)'}"
    problem = check_arguments(tool, call.arguments)
    if problem:
        return "", problem
    try:
        result = tool.fn(**call.arguments)
        if inspect.isawaitable(result):   # an async tool (TRL takes them): awaited on a loop of its own
            result = asyncio.run(_awaited(result))
    except ToolError as e:
        return "", str(e) or f"tool {tool.name!r} failed"
    except Exception as e:  # noqa: BLE001 - a broken tool must not end the rollout
        return "", f"tool {tool.name!r} raised {type(e).__name__}: {e}"
    if isinstance(result, (dict, list)):
        return json.dumps(result, ensure_ascii=False, default=str), ""
    return str(result), ""


async def _awaited(awaitable):
    return await awaitable


# Tool calls of a whole batch share these threads: a call mostly waits (on a sandboxed program), and
# the pool's size bounds how many run at once across every episode.
_CALLS = ThreadPoolExecutor(max_workers=max(8, 4 * (os.cpu_count() or 2)), thread_name_prefix="tool-calls")


def release_idle_threads(wait_s: float = 1.0) -> None:
    """At the program's exit: the pool's idle threads end, so that only a call still running (a tool that
    hangs) keeps one, which the exit then names (rlvr.cli.exit_leaving_threads). The pool takes no more calls."""
    _CALLS.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + wait_s
    for thread in list(_CALLS._threads):
        thread.join(max(0.0, deadline - time.monotonic()))


def run_calls(tools: dict[str, Tool], calls: list[ToolCall], budget_s: float) -> list[tuple[str, str]]:
    """execute() for each call, in order of the calls, on a shared pool: those of concurrent tools at once,
    the rest one after another (a stateful environment's methods keep their order). No result is waited
    for past budget_s from now: a call still running then (or not started) answers with an error, and so
    does every later call of the turn (one after another, four sleeping calls would take 20 s for one
    turn; a method that hangs must not hold the episode, nor the batch, past its budget)."""
    deadline = time.monotonic() + budget_s
    late = ("", "this episode's tool time budget (env.tool_budget_s) ran out; answer without further "
                "tool calls")
    pending = {i: _CALLS.submit(execute, tools, c) for i, c in enumerate(calls)
               if not c.error and getattr(tools.get(c.name), "concurrent", False)}
    out, over = [], False
    for i, call in enumerate(calls):
        left = deadline - time.monotonic()
        if call.error:
            out.append(execute(tools, call))
            continue
        if i not in pending:
            if over or left <= 0:   # a hung call may still run: nothing of the episode starts beside it
                out.append(late)
                continue
            pending[i] = _CALLS.submit(execute, tools, call)
        try:
            # no budget (inf): wait as long as the call's own limits allow; a finite timeout
            # that large overflows the platform's time_t inside the wait
            out.append(pending[i].result(timeout=None if math.isinf(left) else max(0.0, left)))
        except FutureTimeout:
            pending[i].cancel()   # not started yet: never starts; running: its own limits end it, or never
            out.append(late)
            over = True
    return out


_PY_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
             "array": (list,), "object": (dict,)}


def check_arguments(tool: Tool, arguments: dict) -> str:
    """The first way arguments do not fit the tool's schema, naming the argument; "" when they fit."""
    props, required = tool.parameters.get("properties", {}), tool.parameters.get("required", [])
    for name in required:
        if name not in arguments:
            return f"missing required argument {name!r} for tool {tool.name!r}"
    for name, value in arguments.items():
        if name not in props:
            return (f"unexpected argument {name!r} for tool {tool.name!r}; "
                    f"expected: {', '.join(props) or '(none)'}")
        if not _fits(value, props[name]):
            want, got = _a(props[name]["type"]), _a(_json_name(value))
            return f"argument {name!r} of tool {tool.name!r} must be {want}, got {got}"
    return ""


def _fits(value, prop: dict) -> bool:
    """A type this check does not know (a hand-written schema) fits: the tool decides then."""
    want = prop.get("type")
    if not isinstance(want, str) or want not in _PY_TYPES or (value is None and prop.get("nullable")):
        return True
    # JSON true is a Python bool, which is an int: only "boolean" accepts it
    return isinstance(value, _PY_TYPES[want]) and (want == "boolean" or not isinstance(value, bool))


_JSON_NAMES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "object"}


def _json_name(value) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


# ---- prompting ---------------------------------------------------------------------------------

def tool_prompt(tools: list[Tool]) -> str:
    """A system-prompt text describing the tools and the call format, for chat templates without
    tool support (the wording follows the Hermes / Qwen templates the format comes from)."""
    schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
    return ("You may call one or more tools to help with the task. The tools, as JSON schemas:\n"
            f"<tools>\n{schemas}\n</tools>\n"
            "To call a tool, write a JSON object with its name and arguments inside tags:\n"
            f'{OPEN_TAG}\n{{"name": <tool-name>, "arguments": <args-json-object>}}\n{CLOSE_TAG}\n'
            f"At most {MAX_CALLS} calls per turn. The results come back in the next message.")


def template_supports_tools(tok) -> bool:
    """True when tok's chat template renders tools in the <tool_call> form this module parses. A
    template with another call format (Llama 3.1's bare JSON, Mistral's [TOOL_CALLS]) counts as
    no support: tool_prompt() then teaches the form parse_tool_calls reads."""
    template = getattr(tok, "chat_template", None)
    if isinstance(template, dict):   # named templates: any of them ("tool_use" where present)
        template = "\n".join(v for v in template.values() if isinstance(v, str))
    return isinstance(template, str) and "tools" in template and OPEN_TAG in template
