"""Test code run by the trusted parent, with the candidate's functions as proxies into the sandbox.

A dataset's asserts (`assert f(2) == 4`, `abs(f(2) - 1.414) < 1e-9`, `math.isclose(...)`,
`f(x) != 5`, MBPP tuples, `with pytest.raises(...)`) and HumanEval's `def check(candidate): ...`
are dataset code: trusted. They run here, on the parent's side of the sandbox: in a judge worker
process that the trainer can kill (rlvr.rewards.code.judge). Every name they use that
they do not bind themselves (and that is not a builtin or a standard-library module; the spec's
entry point is the candidate's even when a builtin has its name) is a function of the candidate: a
`Proxy` that ships its arguments into the sandbox and returns the plain data that came
back, decoded by a strict decoder. So every comparison, `abs`, `math.isclose` and `in` runs on
values the parent built: no object of the candidate's ever reaches this process.

What cannot be decided this way is refused with `Undecidable`, naming the test: attributes of the
candidate's objects (`Solution().run(...)`, `f.cache`), arguments that are not plain data (a
lambda), a proxy used as anything but a function.
"""
from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import sys
from collections import deque
from dataclasses import dataclass

from rlvr.rewards.code import pytest_compat
from rlvr.sandbox import harness
from rlvr.sandbox.outcome import LIMIT, PROGRAM

_BUILTIN_NAMES = frozenset(dir(builtins))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
# Exceptions a proxy may re-raise as themselves; the rest (SystemExit, StopIteration, which would
# end a `map` or a generator early and so fake an empty result, ...) become CandidateError.
_RERAISE = {n: c for n, c in vars(builtins).items()
            if isinstance(c, type) and issubclass(c, Exception)
            and not issubclass(c, (StopIteration, StopAsyncIteration))}
_EXCEPTIONS = frozenset(n for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, Exception))


class Undecidable(BaseException):
    """The test needs something that cannot be decided outside the sandbox. A BaseException, so
    that test code's own `except Exception` cannot swallow it. args: (what the test does, [how to fix it])."""


class CandidateFailure(BaseException):
    """The candidate failed in a way the test must not be able to catch (it returned something
    that is not plain data, has no such function, or its sandbox ended). args: (why, kind), kind one of
    rlvr.sandbox.run's FAILURE_KINDS."""

    def __init__(self, why: str, kind: str = PROGRAM):
        super().__init__(why, kind)


class UndecidableSpec(ValueError):
    """A spec whose test cannot be decided outside the sandbox: the dataset's problem, raised for
    the whole batch (not one candidate's failure)."""


class CandidateError(Exception):
    """A candidate's exception with no built-in counterpart safe to re-raise here."""


@dataclass(kw_only=True, frozen=True)
class TestCode:
    """One test, compiled. names: the candidate's functions it calls; calls_check: it defines
    check(candidate) and leaves calling it to us; prefetch: calls whose arguments are literals,
    encoded, in source order (shipped in one batch before the test runs); tests: pytest-style
    `def test_...()` functions it defines and never calls, run in order after it; aliases: a
    candidate's function imported under another name (`from solution import f as g`: g -> f)."""

    source: str
    code: object
    names: frozenset
    modules: frozenset
    calls_check: bool
    prefetch: tuple
    tests: tuple = ()
    aliases: tuple = ()

    @property
    def calls_candidate(self) -> bool:
        """Does its source call a function of the candidate (a free name, or check(candidate))?"""
        return bool(self.names) or self.calls_check


class MissingModule(ValueError):
    """Test code imports a module this interpreter lacks: the environment's problem, never a
    candidate's failure; the message names the module and the install line."""


def _bound_names(tree: ast.AST) -> set[str]:
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _check_params(tree: ast.Module) -> set[str]:
    return {a.arg for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"
            for a in node.args.args[:1]}


def compile_test(source: str, label: str, entry_point: str | None) -> TestCode:
    """Parse and vet one test; ValueError naming `label` for what cannot be decided outside,
    MissingModule for an import this interpreter cannot satisfy."""
    tree, aliases = _without_candidate_module(ast.parse(source), source)
    _check_imports(tree, label)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    # The entry point is the candidate's even when a builtin has its name (`max`, `sorted`): the
    # proxy is bound in the test's globals, which come before builtins.
    free = loaded - _bound_names(tree) - (_BUILTIN_NAMES - {entry_point})
    # A standard-library name used only as `name.attr` is the module the test forgot to import
    # (MBPP keeps its imports apart); one that is called is the candidate's function.
    attr_bases = [n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name)]
    uses = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    modules = frozenset(n for n in free if n in _STDLIB and n not in ("this", "antigravity")
                        and uses.count(n) == attr_bases.count(n))
    names = frozenset(free - modules)
    defines_check = any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)
    calls_check = defines_check and not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "check"
        for n in ast.walk(tree))
    if calls_check and not entry_point:
        raise ValueError(f"{label} defines check(candidate) but the spec has no 'entry_point' to pass it")
    cands = names | _check_params(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value.func if isinstance(node.value, ast.Call) else node.value
            if isinstance(base, ast.Name) and base.id in cands:
                raise ValueError(
                    f"{label} uses .{node.attr} of the candidate's {base.id}: only calls that return plain "
                    "data can be decided outside the sandbox; rewrite the test as calls")
    alias = {p: entry_point for p in _check_params(tree)} if calls_check else {}
    return TestCode(source=source, code=compile(tree, f"<{label}>", "exec"), names=names, modules=modules,
                    calls_check=calls_check,
                    prefetch=tuple(_prefetchable(tree, names, {**alias, **aliases})),
                    tests=_test_functions(tree, label),
                    aliases=tuple(aliases.items()))


# The module a pytest-style test file imports the program from (KodCode: `from solution import f`).
CANDIDATE_MODULES = ("solution",)


class _CandidateModule(ast.NodeTransformer):
    """`from solution import f` and `import solution` removed, `solution.f` read as `f`: every name
    taken from the candidate's module becomes a free name, a function of the candidate (a Proxy)."""

    def __init__(self):
        self.aliases: dict[str, str] = {}

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module in CANDIDATE_MODULES:
            self.aliases.update({a.asname: a.name for a in node.names if a.asname and a.asname != a.name})
            return None
        return node

    def visit_Import(self, node):
        kept = [a for a in node.names if a.name not in CANDIDATE_MODULES]
        if not kept:
            return None
        node.names = kept
        return node

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in CANDIDATE_MODULES:
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        self.generic_visit(node)
        return node


def _without_candidate_module(tree: ast.Module, source: str) -> tuple[ast.Module, dict[str, str]]:
    if not any(m in source for m in CANDIDATE_MODULES):
        return tree, {}
    fix = _CandidateModule()
    tree = ast.fix_missing_locations(fix.visit(tree))
    return tree, fix.aliases


def _check_imports(tree: ast.Module, label: str) -> None:
    """Refuse, naming them, what `import pytest` cannot give (rlvr.rewards.code.pytest_compat) and any
    module this interpreter lacks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pytest" \
                and node.attr not in pytest_compat.SUPPORTED:
            raise ValueError(f"{label} uses pytest.{node.attr}; test code may use pytest."
                             f"{', pytest.'.join(pytest_compat.SUPPORTED)} (rlvr.rewards.code.pytest_compat)")
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "pytest":
            extra = [a.name for a in node.names if a.name not in pytest_compat.SUPPORTED]
            if extra:
                raise ValueError(f"{label} imports {extra[0]} from pytest; test code may use "
                                 f"{', '.join(pytest_compat.SUPPORTED)} (rlvr.rewards.code.pytest_compat)")
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
        for name in names:
            top = name.split(".")[0]
            if top != "pytest" and top not in sys.modules and importlib.util.find_spec(top) is None:
                raise MissingModule(
                    f"{label} imports {top}, which the interpreter that runs test code ({sys.executable}) "
                    f"lacks: install it beside rlvr (`{sys.executable} -m pip install {top}`); until then "
                    "this test cannot judge any program, so none is scored on it")


def _test_functions(tree: ast.Module, label: str) -> tuple[str, ...]:
    """Top-level `def test_...()` functions the test code never calls itself: pytest's tests."""
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and node.name not in called:
            if len(node.args.args) + len(node.args.posonlyargs) > len(node.args.defaults) \
                    or node.args.kwonlyargs or node.decorator_list:
                raise ValueError(f"{label} defines {node.name} with parameters or decorators (pytest fixtures "
                                 "or parametrize), which are not supported: write each case as a call")
            found.append(node.name)
    return tuple(found)


def _prefetchable(tree: ast.AST, names: frozenset, alias: dict) -> list[str]:
    """Encoded calls `name(literal, ..., key=literal)` to a candidate function, in source order."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        name = alias.get(node.func.id, node.func.id if node.func.id in names else None)
        if name is None or any(isinstance(a, ast.Starred) for a in node.args) \
                or any(k.arg is None for k in node.keywords):
            continue
        try:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            out.append(_encode_call(name, args, kwargs))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, harness.NotPlain):
            continue
    return out


def _encode_call(name: str, args: list, kwargs: dict) -> str:
    # CALL_DEPTH, not MAX_DEPTH: a value the candidate returned (up to MAX_DEPTH deep, enforced
    # when its reply is decoded) fed back into a call must never make the test Undecidable, which
    # would fail the whole batch.
    return json.dumps([name, harness.encode(list(args), limit=harness.CALL_DEPTH),
                       harness.encode(dict(kwargs), limit=harness.CALL_DEPTH)], separators=(",", ":"))


class Runner:
    """Answers proxy calls for one program: from the prefetched batch when the same call was
    made there, else by a round trip to the running program."""

    def __init__(self, program, prefetch: list[str] = ()):
        self.program = program
        self.failure: BaseException | None = None   # the first in the current test; not swallowable
        self.calls = 0   # calls the tests made, answered from the batch or not
        self.cache: dict[str, deque] = {}
        unique = list(dict.fromkeys(prefetch))
        if unique:
            for key, reply in zip(unique, program.call([json.loads(k) for k in unique])):
                self.cache.setdefault(key, deque()).append(reply)

    def call(self, name: str, args: tuple, kwargs: dict):
        self.calls += 1
        try:
            key = _encode_call(name, list(args), kwargs)
        except harness.NotPlain as e:
            self._fail(Undecidable(f"passes a {e.args[0]} to {name}(), which cannot be shipped into "
                                   "the sandbox as plain data"))
        queue = self.cache.get(key)
        reply = queue.popleft() if queue else self.program.call([json.loads(key)])[0]
        return self._unpack(name, reply)

    def _fail(self, exc: BaseException):
        if self.failure is None:
            self.failure = exc
        raise exc

    def _unpack(self, name: str, reply: list):
        tag = reply[0]
        if tag == "v":
            return reply[1]
        if tag == "m":
            self._fail(CandidateFailure(f"no function named {name}"))
        if tag == "n":
            self._fail(CandidateFailure(f"{name}() returned a {reply[1]}, not plain data"))
        if tag == "x":
            self._fail(CandidateFailure(reply[1], reply[2]))
        type_name, base, message = reply[1:]
        if base == "MemoryError":
            self._fail(CandidateFailure("memory limit", LIMIT))
        exc = _rebuild(type_name, base, message)
        if isinstance(exc, CandidateFailure):
            self._fail(exc)
        raise exc


def _rebuild(type_name: str, base: str, message: str) -> BaseException:
    if base not in _EXCEPTIONS:
        # SystemExit, KeyboardInterrupt, BaseException itself, or a name that is no built-in
        # exception: nothing the test may catch, as pytest.raises(Exception) would not.
        return CandidateFailure("raised " + (f"{type_name}: {message}" if message else type_name))
    cls = _RERAISE.get(base, CandidateError)
    try:
        exc = cls(message)
    except Exception:  # noqa: BLE001 - a constructor wanting other arguments (UnicodeError...)
        exc = CandidateError(message)
    exc.rlvr_candidate = (type_name, message)   # the test's own exceptions have no such mark
    return exc


class Proxy:
    """Stands for one of the candidate's functions: calling it is the only thing it allows."""

    __slots__ = ("_name", "_runner")

    def __init__(self, name: str, runner: Runner):
        self._name, self._runner = name, runner

    def __call__(self, *args, **kwargs):
        return self._runner.call(self._name, args, kwargs)

    def _refuse(self, *_):
        self._runner._fail(Undecidable(f"uses the candidate's {self._name} as a value, not a function call"))

    __getattr__ = __bool__ = __eq__ = __ne__ = __lt__ = __gt__ = __iter__ = __len__ = _refuse
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<candidate function {self._name}>"


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    """Test code's `import`: `pytest` is rlvr.rewards.code.pytest_compat, installed or not."""
    if level == 0 and name == "pytest":
        return pytest_compat
    return __import__(name, globals, locals, fromlist, level)


_TEST_BUILTINS = {**vars(builtins), "__import__": _import}


def run_test(test: TestCode, runner: Runner, entry_point: str | None) -> tuple[bool, str, str]:
    """(passed, why not, kind: "" when passed, else one of rlvr.sandbox.run's FAILURE_KINDS). Raises
    Undecidable (the dataset's problem, not the candidate's)."""
    ns = {"__builtins__": _TEST_BUILTINS, "__name__": "__rlvr_test__"}
    ns.update({m: __import__(m) for m in test.modules})
    aliases = dict(test.aliases)
    ns.update({n: Proxy(aliases.get(n, n), runner) for n in test.names})
    runner.failure, calls = None, runner.calls
    try:
        exec(test.code, ns)  # noqa: S102 - dataset test code, trusted; the candidate is behind proxies
        if test.calls_check:
            ns["check"](Proxy(entry_point, runner))
        for name in test.tests:   # pytest-style: each test function, in order; the first failure decides
            ns[name]()
        outcome = True, "", ""
    except (CandidateFailure, Undecidable):
        outcome = False, "", PROGRAM
    except AssertionError as e:
        outcome = False, _candidate_raised(e) or "assertion failed", PROGRAM
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: B036 - whatever the test raised fails it (pytest.raises'
        # "DID NOT RAISE" is a BaseException)
        outcome = False, _candidate_raised(e) or f"test raised {type(e).__name__}: {e}", PROGRAM
    if isinstance(runner.failure, Undecidable):
        raise runner.failure
    if runner.failure is not None:     # even if the test caught it
        return False, *runner.failure.args
    if outcome[0] and runner.calls == calls and test.calls_candidate:
        # Its calls are in code that never ran: a test class (unittest's or pytest's), a function nothing
        # calls, an `if __name__ == "__main__":` block. Passed, it would pass every program, even none.
        # Nothing of the candidate's ran before its first call, so this is the spec's doing, never a program's.
        raise Undecidable("calls the candidate only in code that never runs here (a test class, a function "
                          "nothing calls, an `if __name__ == '__main__':` block), so it would pass every "
                          "program", "call the candidate at the top level or in pytest-style `def test_...()` "
                          "functions")
    return outcome


def _candidate_raised(e: BaseException) -> str | None:
    mark = getattr(e, "rlvr_candidate", None)
    if mark is None:
        return None
    return "raised " + (f"{mark[0]}: {mark[1]}" if mark[1] else mark[0])
