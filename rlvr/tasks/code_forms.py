"""A code dataset's tests column, in the forms the common datasets give it, as rlvr's tests spec
(rlvr.rewards.code.spec), with what the prompt must show of it. Plain data in, plain data out: the spec is
validated where the code reward loads (rlvr.rewards.preflight.check_test_modules).

- rlvr's own spec, an object with "kind": as it is.
- a list of asserts (MBPP's `test_list`), or Python text of asserts: one assert case each. MBPP's prompt names
  no function, so unless the prompt shows one of the asserts already, the first is shown (EvalPlus's MBPP+
  prompt) and visible; the rest are hidden.
- `input_output` (APPS, TACO): {"inputs": [...], "outputs": [...]}, stdin/stdout pairs (an input or output
  given as a list of lines is those lines joined); with "fn_name", calls of that function: each input is
  the argument list, and an output that is a one-element list is the value it wraps (APPS's call-based
  form, whose checker accepts either). A pair whose input and output both appear in the prompt (the
  examples of the statement) is visible, the rest hidden.
- HumanEval's `test` (`def check(candidate): ...`) with the row's `entry_point`: one hidden assert case;
  when the prompt is HumanEval's code (a signature and docstring), its imports and helpers go before the
  check and into the sandbox as the prelude, as for task.name=humaneval.
JSON text of any of these is decoded first.

A row's reference solution is made the answer its prompt asks for (`reference_reply`): one ```python block, as
task.name=humaneval and pyfunc give theirs, since the code reward runs a completion's last fenced block.
"""
from __future__ import annotations

import ast
import json

from rlvr.errors import RlvrError

SHOW = "\n\nYour code should pass this test:\n{test}"
FENCE = "\n\nWrite your solution in one ```python code block."  # the last fenced block is what runs


def _decoded(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # Python text: asserts, or HumanEval's check
    return value


def _lines(value) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if isinstance(value, str):
        return value
    raise ValueError(f"a stdio input or output must be text or a list of lines, got {type(value).__name__}")


def _asserts(items: list[str], prompt: str) -> tuple[dict, str]:
    shown = [t for t in items if t.strip() and t.strip() in prompt]
    extra = "" if shown else SHOW.format(test=items[0].strip())
    visible = shown or items[:1]
    return {"kind": "assert", "asserts": visible, "hidden": [t for t in items if t not in visible]}, extra


def _statements(code: str) -> list[str]:
    """Python text as its top-level statements when every one is an assert; else the whole text, one case."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return [code]  # the spec's own parse names the error
    if tree.body and all(isinstance(n, ast.Assert) for n in tree.body):
        return [ast.get_source_segment(code, n) for n in tree.body]
    return [code]


def _input_output(io: dict, prompt: str) -> dict:
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("input_output needs lists 'inputs' and 'outputs' of the same length")
    if io.get("fn_name"):
        cases = [{"args": args if isinstance(args, list) else [args],
                  "expected": out[0] if isinstance(out, list) and len(out) == 1 else out}
                 for args, out in zip(inputs, outputs)]
        return {"kind": "function", "entry_point": io["fn_name"], "cases": [], "hidden": cases}
    cases = [{"stdin": _lines(i), "stdout": _lines(o)} for i, o in zip(inputs, outputs)]
    shown = [c for c in cases if c["stdin"].strip() and c["stdin"].strip() in prompt and c["stdout"].strip() in prompt]
    return {"kind": "stdio", "cases": shown, "hidden": [c for c in cases if c not in shown]}


def helpers(prompt: str, entry_point: str, where: str = "") -> str:
    """The prompt without the entry point's definition: its imports, constants and helper functions."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError as e:
        raise RlvrError(f"{where}: the prompt does not parse ({e.msg}, line {e.lineno})") from None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point]
    if len(defs) != 1:
        raise RlvrError(f"{where}: the prompt defines entry_point {entry_point!r} {len(defs)} times, not once")
    lines = prompt.split("\n")
    first = min([defs[0].lineno] + [d.lineno for d in defs[0].decorator_list])
    return "\n".join(lines[:first - 1] + lines[defs[0].end_lineno:]).strip() + "\n"


def check_spec(test: str, entry: str, helper: str) -> dict:
    """HumanEval's form: one hidden case, the prompt's helpers then `def check(candidate)`; the helpers
    again as the sandbox's prelude (defined in the parent too, so a program that redefines one cannot
    change what the check computes)."""
    check = (helper + "\n\n" if helper else "") + test.strip() + "\n"
    return {"kind": "assert", "entry_point": entry, "asserts": [], "hidden": [check], **({"prelude": helper} if helper else {})}


def _check(test: str, entry: str, prompt: str) -> dict:
    try:
        helper = helpers(prompt, entry)   # HumanEval's code prompt: its imports and helper functions
    except RlvrError:
        helper = ""                       # a prose prompt has none
    return check_spec(test, entry, helper)


def dataset_tests(value, row: dict, prompt: str) -> tuple[str, str]:
    """(the spec as JSON text, text to add to the prompt) for a tests column's value in any of the forms
    above; ValueError naming what is wrong for anything else."""
    value = _decoded(value)
    extra = ""
    if isinstance(value, dict) and "kind" in value:
        spec = value
    elif isinstance(value, dict) and ("inputs" in value or "outputs" in value):
        spec = _input_output(value, prompt)
    elif isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        spec, extra = _asserts(value, prompt)
    elif isinstance(value, str) and value.strip() and isinstance(row.get("entry_point"), str) and "def check" in value:
        spec = _check(value, row["entry_point"], prompt)
    elif isinstance(value, str) and value.strip():
        spec, extra = _asserts(_statements(value), prompt)
    else:
        raise ValueError(f"a {type(value).__name__} is not a tests form rlvr reads: give rlvr's spec "
                         "({\"kind\": ...}), a list of asserts (MBPP's test_list), APPS/TACO's input_output "
                         "({\"inputs\": [...], \"outputs\": [...]}), or HumanEval's test with an entry_point column")
    if isinstance(row.get("entry_point"), str) and "entry_point" not in spec and spec.get("kind") == "assert":
        spec = {**spec, "entry_point": row["entry_point"]}  # a function named like a builtin stays the candidate's
    return json.dumps(spec), extra


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def reference_reply(solution: str, prompt: str, spec: str) -> str:
    """A code row's reference solution as the answer the prompt asks for, one ```python block: what the
    preflight, `rlvr audit`, few-shot turns and `rlvr sft` take as a right completion. A bare program (MBPP's
    `code`) is fenced; APPS/TACO's `solutions`, JSON text of a list of programs, gives its first; HumanEval's
    `canonical_solution`, the body of the function the prompt's code begins, is that code and the body (as
    HumanEval's own harness runs prompt + completion). A solution that has a fence already is as it is.
    `spec`: the row's tests spec (JSON text), whose entry_point names the function."""
    if "```" in solution:
        return solution
    listed = _decoded(solution)
    if isinstance(listed, list) and listed and all(isinstance(s, str) for s in listed):
        return reference_reply(listed[0], prompt, spec)
    entry = json.loads(spec).get("entry_point")
    if entry and not _defines(solution, entry) and _defines(prompt + solution, entry):
        solution = prompt + solution
    return "```python\n" + solution.strip("\n").rstrip() + "\n```"
