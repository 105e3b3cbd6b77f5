"""What dataset test code imports as `pytest`: `raises`, `approx` and `fail`, with pytest's semantics.

Test code of an assert spec runs in the judge worker (rlvr.rewards.code.checks), whose interpreter is the
trainer's: pytest may not be installed there, and a test that imports it must not fail a right program
for that. So `import pytest` in test code always gives this module, installed or not, and every
spec is judged the same way on every machine. A test that uses any other part of pytest is refused
when the spec is parsed (rlvr.rewards.code.checks.compile_test), naming what it used.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping

SUPPORTED = ("raises", "approx", "fail")


class Failed(BaseException):
    """A failed test (`fail()`, a `raises` that saw no exception). A BaseException, as pytest's, so
    that test code's own `except Exception` does not swallow it."""


def fail(reason: str = "") -> None:
    raise Failed(reason)


class _Raises:
    def __init__(self, expected, match: str | None):
        self.expected, self.match, self.value = expected, match, None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            raise Failed(f"DID NOT RAISE {_names(self.expected)}")
        if not issubclass(exc_type, self.expected):
            return False   # not the expected exception: it goes on (a CandidateFailure included)
        if self.match is not None and not re.search(self.match, str(exc)):
            raise Failed(f"Regex pattern did not match.\n Regex: {self.match!r}\n Input: {str(exc)!r}")
        self.value = exc
        return True


def _names(expected) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(getattr(t, "__name__", str(t)) for t in types)


def raises(expected, *args, match: str | None = None, **kwargs):
    """`with raises(E, match=...): ...`, or `raises(E, func, *args, **kwargs)`."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise TypeError(f"expected exception must be a BaseException type, not {expected!r}")
    context = _Raises(expected, match)
    if not args:
        return context
    with context:
        args[0](*args[1:], **kwargs)
    return context


class _Approx:
    """Compares equal to values within tolerance of `expected`, element by element for sequences
    and mappings: rel 1e-6 and abs 1e-12 by default; abs alone means no relative tolerance."""

    def __init__(self, expected, rel=None, abs=None, nan_ok: bool = False):
        self.expected, self.rel, self.abs, self.nan_ok = expected, rel, abs, nan_ok

    def _scalar(self, expected, actual) -> bool:
        if isinstance(expected, bool) or isinstance(actual, bool) or not isinstance(expected, (int, float)) \
                or not isinstance(actual, (int, float)):
            return expected == actual
        if math.isnan(expected) or math.isnan(actual):
            return self.nan_ok and math.isnan(expected) and math.isnan(actual)
        if math.isinf(expected) or math.isinf(actual):
            return expected == actual
        tolerance = 1e-12 if self.abs is None else self.abs
        if not (self.abs is not None and self.rel is None):
            tolerance = max(tolerance, (1e-6 if self.rel is None else self.rel) * math.fabs(expected))
        return math.fabs(expected - actual) <= tolerance

    def _equal(self, expected, actual) -> bool:
        if isinstance(expected, Mapping):
            return isinstance(actual, Mapping) and expected.keys() == actual.keys() \
                and all(self._equal(expected[k], actual[k]) for k in expected)
        if isinstance(expected, (list, tuple)):
            return isinstance(actual, (list, tuple)) and len(expected) == len(actual) \
                and all(self._equal(e, a) for e, a in zip(expected, actual))
        return self._scalar(expected, actual)

    def __eq__(self, actual) -> bool:
        return self._equal(self.expected, actual)

    def __ne__(self, actual) -> bool:
        return not self == actual

    __hash__ = None

    def __repr__(self) -> str:
        return f"approx({self.expected!r})"


def approx(expected, rel=None, abs=None, nan_ok: bool = False) -> _Approx:
    return _Approx(expected, rel, abs, nan_ok)
