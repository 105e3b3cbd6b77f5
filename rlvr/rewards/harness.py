"""The harness that runs inside the sandbox, and the parent's reader for what it reports.

The sandbox runs `python -I -c <this file's text> RESULT_FD PAYLOAD_FD`. The harness reads the
payload (the program, the inputs, a secret made for this run) from PAYLOAD_FD and closes it, runs
the untrusted program, calls it on each case and writes one tagged line per case to RESULT_FD:

    <secret> <case> value <json>     a function result or an assert's left-hand side, as plain JSON
    <secret> <case> ok               an assert statement ran to completion
    <secret> <case> err <message>    the case raised
    <secret> load err <message>      the program did not load, or has no such function

It never sees an expected value: the parent compares. Threats this side addresses:
- the program rebinding builtins, `json`, `os.write` or `print`: every reference the harness uses
  is taken at startup, before any untrusted code runs, and results are encoded by a small encoder
  here that accepts exact built-in types only, so no user `__eq__`, `__repr__` or subclass runs;
- forged lines on stdout or on guessed descriptors: only RESULT_FD counts, and only lines that
  start with the secret;
- `sys.exit`, `SystemExit` or `KeyboardInterrupt` inside a case: caught per case (BaseException);
- `os._exit` or a killed harness: the parent scores a case only when its line arrives;
- lingering threads and atexit hooks: the harness ends with `os._exit` once it has reported;
- shadowed builtins (`len = lambda _: 3`, a redefined `__builtins__`): test code runs with the
  builtins captured at startup and does not see the program's globals that shadow them.
Residual risk, stated plainly: anything in this process can, with enough effort (gc, frames,
ctypes), find the secret and write lines. That buys nothing for function cases and for asserts of
the form `assert expr == literal` (the parent holds the expected value), but other asserts are
trusted to this process; the parent rejects a case reported twice, so a forger must also stop
the harness's own line.
"""
from __future__ import annotations

import builtins
import json
import os
import resource
import sys
import types
from json.encoder import encode_basestring_ascii

# Taken before untrusted code runs; the program may rebind any of these names later.
_write, _exit, _read, _close = os.write, os._exit, os.read, os.close
_loads, _compile, _exec, _eval = json.loads, compile, exec, eval
_type, _str, _int, _callable, _enumerate = type, str, int, callable, enumerate
_dict_items, _INF = dict.items, float("inf")
_BaseException, _AssertionError, _RecursionError = BaseException, AssertionError, RecursionError
_enc_str, _int_repr, _float_repr = encode_basestring_ascii, int.__repr__, float.__repr__
_type_name = type.__dict__["__name__"].__get__   # a metaclass cannot fake the class name
_PRISTINE = dict(builtins.__dict__)               # the builtins test code sees
_MAX_DEPTH = 100


class _NotData(Exception):
    """A result that is not plain JSON data (a custom object, NaN, a subclass, too deep)."""


def to_json(value, depth=0) -> str:
    """Encode exact None/bool/int/float/str/list/tuple/dict-with-str-keys; anything else is not data.

    Exact types only: an int subclass or an object with a lying `__eq__` is refused, not encoded.
    """
    t = _type(value)
    if depth > _MAX_DEPTH:
        raise _NotData("nested too deep")
    if value is None or t is bool:
        return "null" if value is None else ("true" if value else "false")
    if t is int:
        return _int_repr(value)
    if t is float:
        if value != value or value in (_INF, -_INF):
            raise _NotData("NaN or infinity")
        return _float_repr(value)
    if t is str:
        return _enc_str(value)
    if t is list or t is tuple:
        return "[" + ",".join([to_json(v, depth + 1) for v in value]) + "]"
    if t is dict:
        parts = []
        for k, v in _dict_items(value):
            if _type(k) is not str:
                raise _NotData("a dict key that is not a string")
            parts.append(_enc_str(k) + ":" + to_json(v, depth + 1))
        return "{" + ",".join(parts) + "}"
    raise _NotData(_type_name(t))


def describe(exc) -> str:
    """'Name: message' on one line; the message comes from user code, so it may itself fail."""
    name = _type_name(_type(exc))
    try:
        text = _str(exc)
    except _BaseException:
        text = "?"
    return (name + ": " + text if text else name).replace("\n", " ")[:300]


def make_reporter(fd: int, token: str):
    def report(case, status: str, text: str = "") -> None:
        line = token + " " + _str(case) + " " + status + (" " + text if text else "") + "\n"
        data = line.encode("utf-8", "replace")
        try:
            while data:
                data = data[_write(fd, data):]
        except OSError:  # the program closed or replaced the pipe: the parent sees nothing
            pass
    return report


def report_value(report, case, value) -> None:
    try:
        text = to_json(value)
    except _NotData as e:
        report(case, "err", "not JSON data: " + e.args[0])
    except (_RecursionError, ValueError):  # ValueError: an int too long for str()
        report(case, "err", "not JSON data: too deep or too large")
    else:
        report(case, "value", text)


def load_program(source: str, name: str):
    """Run the program as module `name`; return its namespace."""
    sys.argv = ["solution.py"]  # not the harness's own arguments
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = builtins
    sys.modules[name] = module
    _exec(_compile(source, "<solution>", "exec"), module.__dict__)
    return module.__dict__


def test_globals(namespace: dict) -> dict:
    """The program's globals minus those that shadow a builtin, with the startup builtins."""
    glb = {k: v for k, v in _dict_items(namespace) if k not in _PRISTINE}
    glb["__builtins__"] = _PRISTINE
    return glb


def run_function(namespace: dict, payload: dict, report) -> None:
    fn = namespace.get(payload["entry_point"])
    if not _callable(fn):
        report("load", "err", "no function named " + payload["entry_point"])
        return
    for i, (args, kwargs) in _enumerate(payload["calls"]):
        try:
            value = fn(*args, **kwargs)
        except _BaseException as e:  # SystemExit and KeyboardInterrupt are a failed case too
            report(i, "err", describe(e))
            continue
        report_value(report, i, value)


def run_asserts(namespace: dict, checks: list, report) -> None:
    """checks: (mode, code object): 'value' evaluates an expression, 'stmt' executes an assert."""
    for i, (mode, code) in _enumerate(checks):
        try:
            if mode == "value":
                value = _eval(code, test_globals(namespace))
            else:
                _exec(code, test_globals(namespace))
        except _AssertionError:
            report(i, "err", "assertion failed")
            continue
        except _BaseException as e:
            report(i, "err", describe(e))
            continue
        if mode == "value":
            report_value(report, i, value)
        else:
            report(i, "ok")


def read_payload(fd: int) -> dict:
    chunks = []
    while True:
        chunk = _read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    _close(fd)
    return _loads(b"".join(chunks).decode("utf-8"))


def main(argv) -> None:
    result_fd, payload_fd = _int(argv[1]), _int(argv[2])
    payload = read_payload(payload_fd)
    if payload.get("max_procs"):
        # Set here, inside the sandbox's user namespace, so it counts this sandbox's processes
        # only (see rlvr.rewards.sandbox); the hard limit cannot be raised again without privilege.
        resource.setrlimit(resource.RLIMIT_NPROC, (payload["max_procs"], payload["max_procs"]))
    if payload["kind"] == "stdio":
        _close(result_fd)  # nothing to report: the parent judges stdout
        load_program(payload["source"], "__main__")
        return
    report = make_reporter(result_fd, payload.pop("token"))
    # Compile the tests before the program runs: `compile` may be rebound afterwards.
    checks = [(m, _compile(c, "<test %d>" % i, "eval" if m == "value" else "exec"))
              for i, (m, c) in enumerate(payload.get("checks", []))]
    try:
        namespace = load_program(payload["source"], "solution")
    except _BaseException as e:
        report("load", "err", describe(e))
        _exit(0)
    if payload["kind"] == "function":
        run_function(namespace, payload, report)
    else:
        run_asserts(namespace, checks, report)
    _exit(0)  # before lingering threads or atexit hooks can do anything more


# ---- parent side -------------------------------------------------------------------------------

def parse_reports(channel: bytes, token: str) -> tuple[dict, set]:
    """Lines tagged with `token` -> ({case: (status, text)}, {cases reported more than once}).

    Untagged lines are ignored; a case reported twice is a forgery attempt and fails.
    """
    reports, dupes = {}, set()
    prefix = token + " "
    for raw in channel.split(b"\n"):
        line = raw.decode("utf-8", "replace")
        if not line.startswith(prefix):
            continue
        case, _, rest = line[len(prefix):].partition(" ")
        status, _, text = rest.partition(" ")
        if case in reports:
            dupes.add(case)
        reports[case] = (status, text)
    return reports, dupes


if __name__ == "__main__":
    main(sys.argv)
