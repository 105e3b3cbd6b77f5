"""The harness that runs inside the sandbox, and the plain-data codec both sides share.

The sandbox runs `python -I -c <this file's text> PAYLOAD_FD (STATUS_FD | REQUEST_FD RESPONSE_FD)`.
PAYLOAD_FD holds the program (and a process limit); the harness reads and closes it and compiles the
program, then:
- stdio mode: writes `["syntax", type, builtin base, message]` to STATUS_FD when the program does not
  compile, and closes STATUS_FD before any of the program runs; runs it as __main__; the parent judges
  its stdout;
- serve mode: writes `["compiled"]` or `["syntax", type, builtin base, message]`, then loads the
  program as module `solution`, writes one line, `["ready"]` or `["load", type, builtin base,
  message]`, then serves requests until end-of-file. A request is one
  line, `[[name, args, kwargs], ...]`; each call gets one line back:
      ["v", value]                     the call returned plain data (encoded below)
      ["e", type, builtin base, msg]   it raised
      ["n", type]                      it returned something that is not plain data
      ["m"]                            the program has no callable of that name

Nothing decided here matters (the program shares this process and can rewrite it): the parent holds every
expected value and every test's source, and compares decoded plain data itself. A program that rewrites this
harness, walks its frames or forges lines can only change what "its function returned", which it controls
anyway. The one exception is the compile status: it is written before any of the program runs (in stdio
mode to a descriptor closed before it runs), so the parent can take "it did not compile" as a fact, not as
words the program chose. So this file needs no secret and no defence of its own beyond not executing what it decodes.

Plain data, typed so that the parent can tell a tuple from a list: None, bool, int, str and a JSON
list stand for themselves; a finite float is a JSON float; everything else is a one-key object:
    {"f": "nan"|"inf"|"-inf"}  {"t": [...]} tuple  {"s": [...]} set  {"z": [...]} frozenset
    {"d": [[k, v], ...]} dict  {"b": "hex"} bytes  {"c": [re, im]} complex
    {"i": "hex"} an int too long for JSON's decimal digits (Python refuses to convert more than 4300;
                 hexadecimal is read in linear time and has no such limit)
Types are matched exactly (`type(v) is list`), so no subclass or custom method ever runs in encoding.
"""
from __future__ import annotations

import json
import os
import re
import resource
import sys
import types

MAX_DEPTH = 60          # the deepest value a call may return
CALL_DEPTH = 4 * MAX_DEPTH   # the deepest arguments the parent ships in: a returned value fed back
                             # into another call (`dec(enc(s))`) must always fit
BIG_INT_BITS = 13_000   # ints longer than this (about 3900 decimal digits) travel as hexadecimal
MAX_SAME_HASH = 8       # set elements or dict keys sharing one hash: more is a collision flood
_NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_type_name = type.__dict__["__name__"].__get__   # a metaclass cannot fake the class name


class NotPlain(Exception):
    """A value outside the plain-data types (carries the offending type's name)."""


# ---- the codec (both sides) ---------------------------------------------------------------------

def encode(value, depth: int = 0, limit: int = MAX_DEPTH):
    """A JSON-ready structure for plain data; NotPlain names the first type that is not."""
    if depth > limit:
        raise NotPlain("nesting deeper than %d" % limit)
    t = type(value)
    if t is int and int.bit_length(value) > BIG_INT_BITS:
        return {"i": format(value, "x")}
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if value != value or value in (_NONFINITE["inf"], _NONFINITE["-inf"]):
            return {"f": "nan" if value != value else ("inf" if value > 0 else "-inf")}
        return value
    if t is list:
        return [encode(v, depth + 1, limit) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1, limit) for v in value]}
    if t is set or t is frozenset:
        return {"s" if t is set else "z": [encode(v, depth + 1, limit) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1, limit), encode(v, depth + 1, limit)]
                      for k, v in dict.items(value)]}
    if t is bytes:
        return {"b": bytes.hex(value)}
    if t is complex:
        return {"c": [encode(value.real, depth + 1, limit), encode(value.imag, depth + 1, limit)]}
    raise NotPlain(_type_name(t))


def dumps(value) -> str:
    return json.dumps(encode(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _number(v) -> bool:
    return type(v) in (int, float)


def _spread(keys) -> None:
    """Refuse set elements or dict keys that share a hash beyond MAX_SAME_HASH: building a set
    from n colliding ints (all multiples of 2**61 - 1 hash alike) takes O(n^2) time, holding the
    GIL, in the process that decodes it. Sorting the hashes costs O(n log n) and hashes nothing."""
    hashes = sorted(map(hash, keys))   # TypeError for an unhashable key: rejected by loads
    run = 1
    for a, b in zip(hashes, hashes[1:]):
        run = run + 1 if a == b else 1
        if run > MAX_SAME_HASH:
            raise ValueError("too many keys with one hash")


def _within(value, limit: int) -> None:
    """ValueError when a decoded value nests deeper than encode(limit=limit) would allow."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        t = type(v)
        if t is dict:
            children = [x for kv in dict.items(v) for x in kv]
        elif t in (list, tuple, set, frozenset):
            children = v
        elif t is complex:
            children = (0.0,)
        else:
            continue
        if children and depth + 1 > limit:
            raise ValueError("nesting deeper than %d" % limit)
        stack.extend((c, depth + 1) for c in children if type(c) in _CONTAINERS)


_CONTAINERS = (list, tuple, set, frozenset, dict, complex)
_HEX_INT = re.compile(r"-?[0-9a-f]+")


def _tagged(pairs):
    """object_pairs_hook: every JSON object must be exactly one known tag with a well-typed body."""
    if len(pairs) != 1:
        raise ValueError("a tagged value has exactly one key")
    tag, body = pairs[0]
    if tag == "f" and type(body) is str and body in _NONFINITE:
        return _NONFINITE[body]
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "i" and type(body) is str and _HEX_INT.fullmatch(body):
        return int(body, 16)
    if type(body) is not list:
        raise ValueError("malformed tagged value %r" % tag)
    if tag == "t":
        return tuple(body)
    if tag == "s" or tag == "z":
        _spread(body)           # TypeError for an unhashable element: rejected by the caller
        return set(body) if tag == "s" else frozenset(body)
    if tag == "d":
        if not all(type(p) is list and len(p) == 2 for p in body):
            raise ValueError("malformed dict")
        _spread(p[0] for p in body)
        return dict(body)
    if tag == "c" and len(body) == 2 and all(map(_number, body)):
        return complex(body[0], body[1])
    raise ValueError("unknown tag %r" % tag)


def loads(text, max_depth: int | None = None):
    """Strict decoder: JSON plus the tags above, nothing executed; ValueError for anything else,
    including a value nesting deeper than max_depth (the parent reads replies with it, so what it
    decodes can always be shipped back in as an argument)."""
    def reject(name):
        raise ValueError(name + " is not allowed")
    try:
        value = json.loads(text, object_pairs_hook=_tagged, parse_constant=reject)
    except (RecursionError, TypeError, OverflowError) as e:   # too deep, unhashable, too big
        raise ValueError("not plain data: " + type(e).__name__) from None
    if max_depth is not None:
        _within(value, max_depth)
    return value


# ---- inside the sandbox -------------------------------------------------------------------------

def describe(exc) -> list:
    """[type name, nearest built-in base name, message]; the message comes from user code."""
    t = type(exc)
    base = next((k.__name__ for k in t.__mro__ if k.__module__ == "builtins"), "Exception")
    try:
        text = str(exc)
    except BaseException:  # noqa: B036 - a hostile __str__ may raise anything
        text = "?"
    return [_type_name(t), base, text[:500]]


def compile_program(source: str, status_fd: int):
    """The program's code object; when it does not compile, ["syntax", ...] on status_fd and the
    exception re-raised (its traceback is the run's stderr, as before)."""
    try:
        return compile(source, "<solution>", "exec")
    except BaseException as e:  # noqa: B036 - SyntaxError, ValueError (a null byte), MemoryError, RecursionError
        write_line(status_fd, ["syntax", *describe(e)])
        raise


def load_program(code, name: str) -> dict:
    sys.argv = ["solution.py"]  # not the harness's own arguments
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module.__dict__


def answer(namespace: dict, name, args, kwargs) -> list:
    fn = namespace.get(name) if type(name) is str else None
    if not callable(fn):
        return ["m"]
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036 - SystemExit, KeyboardInterrupt: a failed call too
        return ["e", *describe(e)]
    try:
        return ["v", encode(value)]
    except NotPlain as e:
        return ["n", e.args[0]]
    except (RecursionError, MemoryError) as e:
        return ["e", *describe(e)]


def write_line(fd: int, obj) -> None:
    data = (json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def read_lines(fd: int):
    buf = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line


def serve(source: str, req_fd: int, resp_fd: int) -> None:
    try:
        code = compile_program(source, resp_fd)
    except BaseException:  # noqa: B036 - said on resp_fd
        os._exit(0)
    write_line(resp_fd, ["compiled"])   # before any of the program runs: the parent trusts this line only
    try:
        namespace = load_program(code, "solution")
    except BaseException as e:  # noqa: B036
        write_line(resp_fd, ["load", *describe(e)])
        os._exit(0)
    write_line(resp_fd, ["ready"])
    for line in read_lines(req_fd):
        for name, args, kwargs in loads(line):
            try:
                write_line(resp_fd, answer(namespace, name, args, kwargs))
            except (MemoryError, RecursionError, ValueError) as e:  # a result too big to write
                write_line(resp_fd, ["e", *describe(e)])
    os._exit(0)  # before lingering threads or atexit hooks can do anything more


def read_payload(fd: int) -> dict:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks).decode("utf-8"))


def main(argv) -> None:
    payload = read_payload(int(argv[1]))
    if payload.get("max_procs"):
        # Set here, inside the sandbox's user namespace, so it counts this sandbox's processes
        # only (see rlvr.sandbox.run); the hard limit cannot be raised again without privilege.
        resource.setrlimit(resource.RLIMIT_NPROC, (payload["max_procs"], payload["max_procs"]))
    if len(argv) > 3:
        serve(payload["source"], int(argv[2]), int(argv[3]))
    else:
        status_fd = int(argv[2])
        try:
            code = compile_program(payload["source"], status_fd)
        finally:
            os.close(status_fd)   # before any of the program runs: it cannot write a status of its own
        load_program(code, "__main__")


if __name__ == "__main__":
    main(sys.argv)
