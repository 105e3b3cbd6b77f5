"""Symbolic answer comparison in a separate process that can be killed.

Model-written LaTeX goes to sympy only here: a child process with an address-space limit, fed one
JSON request per line, given a wall-clock limit per answer by the parent. A power tower, a deeply
nested expression or a memory bomb costs that one answer its limit and a worker restart, nothing more.

Run as `python -m rlvr.rewards.maths.worker` (the parent does this).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

from rlvr.sandbox.worker import KillableWorker

WORKER_MEMORY_BYTES = 2 * 1024 ** 3

# ---------------------------------------------------------------- LaTeX -> sympy text (child side)

_COMMANDS = {r"\pi": " pi ", r"\cdot": "*", r"\times": "*", r"\div": "/", r"\infty": " oo ",
             r"\ln": " log", r"\log": " log", r"\sin": " sin", r"\cos": " cos", r"\tan": " tan",
             r"\sec": " sec", r"\csc": " csc", r"\cot": " cot", r"\exp": " exp"}
_JUXTAPOSED = re.compile(r"\)\s*[\d.]")
_ALLOWED = re.compile(r"^[0-9a-zA-Z\s+\-*/^().,\[\]!]*$")
_NAMES = {"pi", "oo", "log", "sin", "cos", "tan", "sec", "csc", "cot", "exp", "sqrt", "e", "i", "binomial",
          "factorial"}


def _enclosed(s: str, i: int, opener: str, closer: str) -> tuple[str, int]:
    """The balanced group s[i] == opener .. its closer: (its inside, the index after it)."""
    depth = 0
    for j in range(i, len(s)):
        depth += {opener: 1, closer: -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1:j], j + 1
    raise ValueError(f"unbalanced {opener}{closer}")


def _skip_spaces(s: str, i: int) -> int:
    while i < len(s) and s[i] == " ":
        i += 1
    return i


def _group(s: str, i: int) -> tuple[str, int]:
    """The brace group (or single character) starting at s[i], and the index after it."""
    i = _skip_spaces(s, i)
    if i >= len(s):
        raise ValueError("missing argument")
    return (s[i], i + 1) if s[i] != "{" else _enclosed(s, i, "{", "}")


def _log_argument(s: str, i: int) -> tuple[str, int]:
    """The argument of `\\log_b`: a brace or parenthesis group, else a run of digits or one letter."""
    i = _skip_spaces(s, i)
    if i < len(s) and s[i] == "(":
        return _enclosed(s, i, "(", ")")
    if i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and (s[j].isdigit() or s[j] == "."):
            j += 1
        return s[i:j], j
    return _group(s, i)


def _structure(s: str) -> str:
    """\\frac{a}{b} -> ((a)/(b)), \\sqrt{a} -> sqrt(a), \\sqrt[n]{a} -> ((a)**(1/(n))),
    \\binom{n}{k} -> binomial(n, k), \\log_b x -> log(x, b), recursively."""
    out, i = [], 0
    while i < len(s):
        j = s.find("\\", i)  # only a command can need rewriting: copy up to the next one
        out.append(s[i:] if j == -1 else s[i:j])
        if j == -1:
            break
        i = j
        if s.startswith("\\frac", i) or s.startswith("\\binom", i):
            name = "frac" if s.startswith("\\frac", i) else "binom"
            a, i = _group(s, i + len(name) + 1)
            b, i = _group(s, i)
            a, b = _structure(a), _structure(b)
            out.append(f"(({a})/({b}))" if name == "frac" else f"binomial(({a}),({b}))")
        elif s.startswith("\\log_", i):
            base, i = _group(s, i + 5)
            arg, i = _log_argument(s, i)
            out.append(f"log(({_structure(arg)}),({_structure(base)}))")
        elif s.startswith("\\sqrt", i):
            i += 5
            if i < len(s) and s[i] == "[":
                j = s.index("]", i)
                n, (a, i) = s[i + 1:j], _group(s, j + 1)
                out.append(f"(({_structure(a)})**(1/({_structure(n)})))")
            else:
                a, i = _group(s, i)
                out.append(f"sqrt({_structure(a)})")
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _braces(s: str) -> str:
    """Brace groups as LaTeX renders them: an exponent's or subscript's group, or one raised to a
    power, is a parenthesised group; any other group only groups (`5{6}` renders as 56, not 5*6)."""
    if "{" not in s:
        return s.replace("}", ")")
    out, stack = list(s), []
    for i, ch in enumerate(s):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            j = stack.pop()
            before, after = s[:j].rstrip()[-1:], s[i + 1:].lstrip()[:1]
            keep = before in ("^", "_") or after == "^"
            out[j], out[i] = ("(", ")") if keep else ("", "")
    return "".join(out).replace("{", "(").replace("}", ")")


def latex_to_text(s: str) -> str:
    """A whitelisted rewrite of LaTeX into sympy syntax; anything unknown is refused."""
    for short in ("\\dfrac", "\\tfrac"):
        s = s.replace(short, "\\frac")
    for short in ("\\dbinom", "\\tbinom"):
        s = s.replace(short, "\\binom")
    s = _structure(s)
    for cmd in sorted(_COMMANDS, key=len, reverse=True):
        s = s.replace(cmd, _COMMANDS[cmd])
    s = _braces(s).replace("^", "**")
    if _JUXTAPOSED.search(s):   # `\frac{1}{2}3`, `\frac12 3`: two numbers side by side, no product
        raise ValueError("numbers side by side")
    if "\\" in s or not _ALLOWED.match(s):
        raise ValueError("unsupported notation")
    words = set(re.findall(r"[a-zA-Z_]+", s)) - _NAMES
    if any(len(w) > 1 for w in words):
        raise ValueError(f"unknown name {sorted(words)[0]!r}")
    return s


def _parse(text: str):
    import sympy
    from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr, rationalize,
                                            standard_transformations)

    text = latex_to_text(text)
    names = {"pi": sympy.pi, "oo": sympy.oo, "log": sympy.log, "sin": sympy.sin, "cos": sympy.cos,
             "tan": sympy.tan, "sec": sympy.sec, "csc": sympy.csc, "cot": sympy.cot, "exp": sympy.exp,
             "sqrt": sympy.sqrt, "e": sympy.E, "i": sympy.I, "binomial": sympy.binomial,
             "factorial": sympy.factorial}
    for letter in set(re.findall(r"\b[a-zA-Z]\b", text)) - set(names):
        names[letter] = sympy.Symbol(letter)
    # decimals as exact rationals: sqrt(10.5) is sqrt(21/2), and a float's rounding never decides equality
    transformations = standard_transformations + (implicit_multiplication_application,)
    if "." in text:  # only a decimal needs the extra pass
        transformations += (rationalize,)
    return parse_expr(text, local_dict=names, global_dict={"__builtins__": {}, "Integer": sympy.Integer,
                      "Float": sympy.Float, "Rational": sympy.Rational, "Symbol": sympy.Symbol},
                      transformations=transformations)


def compare(answer: str, gold: str, tol: str | None, mode: str = "equal") -> tuple[bool, str]:
    """mode "equal": answer == gold (to `tol` when given). mode "proportional": answer is a nonzero
    constant multiple of gold, both nonzero: how the sides' differences of equivalent equations
    relate (x - 2y = 1 and 2x - 4y - 2 = 0). mode "positive": a positive constant multiple, as for
    equivalent inequalities (-x > -1 and x < 1)."""
    import sympy

    a, g = _parse(answer), _parse(gold)
    if a.has(sympy.oo, sympy.zoo, sympy.nan) != g.has(sympy.oo, sympy.zoo, sympy.nan):
        return False, "not equivalent"
    if mode in ("proportional", "positive"):
        if sympy.simplify(a) == 0 or sympy.simplify(g) == 0:
            return False, "a trivial relation"
        ratio = sympy.simplify(a / g)
        sign_ok = ratio.is_positive if mode == "positive" else ratio != 0
        equal = not ratio.free_symbols and ratio.is_finite and sign_ok
        kind = "inequalities" if mode == "positive" else "equations"
        return bool(equal), f"equivalent {kind}" if equal else f"not equivalent {kind}"
    if sympy.simplify(a - g) == 0:
        return True, "equivalent"
    if tol is not None and not a.free_symbols and not g.free_symbols:
        diff = a - g if (a - g).is_Rational else sympy.N(a - g, 30)   # a rational difference exactly
        if abs(diff) < sympy.Rational(tol):   # strictly: a tie rounds either way
            return True, "equal to the gold's rounding"
    return False, "not equivalent"


def serve() -> None:
    import resource

    # set here, not in a preexec_fn: workers start from the trainer's threads (rlvr.sandbox.launcher)
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    sys.setrecursionlimit(2000)
    import sympy.parsing.sympy_parser  # noqa: F401 - loaded before "ready": an answer's time limit is its own
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            equal, reason = compare(req["answer"], req["gold"], req.get("tol"), req.get("mode", "equal"))
        except MemoryError:
            equal, reason = False, "memory limit while parsing"
        except Exception as e:  # any parse failure means "not an answer we accept"
            equal, reason = False, f"could not parse ({type(e).__name__})"
        out.write(json.dumps({"equal": bool(equal), "reason": reason}) + "\n")
        out.flush()


# ---------------------------------------------------------------- parent side


class SymbolicWorker:
    """One killable child process (rlvr.sandbox.worker); `compare` gives each answer `timeout_s` of wall
    clock. Thread-safe: the reward's threads share one worker."""

    def __init__(self, timeout_s: float = 2.0, startup_timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self._worker = KillableWorker("rlvr.rewards.maths.worker", "the symbolic maths worker", startup_timeout_s)
        self._lock = threading.Lock()
        self.restarts = 0

    @property
    def process(self) -> subprocess.Popen | None:
        """The running child, None before the first answer or after a kill."""
        return self._worker.proc

    def _kill(self) -> None:
        if self._worker.proc is not None:
            self._worker.kill()
            self.restarts += 1

    def compare(self, answer: str, gold: str, tol: str | None = None, mode: str = "equal",
                timeout_s: float | None = None) -> tuple[bool, str]:
        """One comparison with `timeout_s` (at most the worker's own limit) of wall clock; a caller
        that makes several for one answer passes what is left of that answer's budget."""
        limit = self.timeout_s if timeout_s is None else min(self.timeout_s, timeout_s)
        if limit <= 0:
            return False, "time budget for this answer spent"
        request = {"answer": answer, "gold": gold, "tol": tol}
        if mode != "equal":
            request["mode"] = mode
        with self._lock:
            if self._worker.proc is not None and not self._worker.alive():  # died since the last answer
                self._kill()
            if self._worker.proc is None:
                self._worker.start()
            reply, failure = self._worker.ask(request, limit)
            if reply is None:
                self.restarts += 1   # ask killed it
                return False, "checker crashed" if failure == "crashed" else f"timed out after {limit:g}s"
            return reply["equal"], reply["reason"]

    def close(self) -> None:
        with self._lock:
            self._kill()


if __name__ == "__main__":
    serve()
