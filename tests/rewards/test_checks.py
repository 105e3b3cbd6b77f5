"""Assert and HumanEval-style test code, run in the parent on the candidate's replies (rlvr.rewards.code.checks):
every form real datasets use is decided on plain data the parent built, forgeries earn no more than the values
they answer, what cannot be decided that way is refused naming the test, and the candidate's exceptions never
satisfy more than the test asked for."""
import pytest

from rlvr.rewards.code import make_code_tests, parse_spec
from tests.conftest import python_block

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)
partial = make_code_tests(partial=True, timeout_s=LIMIT_S)


def verdict(src: str, spec, rw=reward):
    return rw.verdicts([python_block(src)], tests=[spec])[0]


# ---- the parent decides every check ---------------------------------------------------

# Real datasets' forms, none of them `expr == JSON literal`.
FORMS = {"kind": "assert", "entry_point": "root2", "asserts": [
    "assert abs(root2(2) - 1.41421356) < 1e-6",
    "import math\nassert math.isclose(root2(9), 3.0, rel_tol=1e-9)",
    "assert root2(4) != 5",
    "assert pair(3) == (3, 9)",                          # MBPP compares tuples
    "assert 1.9 < root2(4) <= 2.0 and 3 in [pair(3)[0]]",
    "import pytest\nwith pytest.raises(ValueError):\n    root2(-1)",
], "hidden": [
    "def check(candidate):\n    assert candidate(16) == 4.0\n    assert all(map(lambda x: candidate(x) >= 0, [0, 1, 4]))\n",
    "assert math.isclose(root2(2) ** 2, 2)",               # `math` not imported: MBPP keeps imports apart
]}
GOOD = """
    def root2(x):
        if x < 0:
            raise ValueError("negative")
        return x ** 0.5
    def pair(n):
        return (n, n * n)
"""


def test_every_form_passes_a_correct_program_and_is_decided_in_the_parent():
    v = verdict(GOOD, FORMS)
    assert (v.score, v.reason) == (1.0, "passed 8/8"), v.reason


FORGERIES = {
    # An object whose every comparison, arithmetic operator and abs succeeds, with math shadowed.
    "omni-object-and-fake-math": """
        import sys, types
        class Omni:
            def __eq__(s, o): return True
            __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__
            def __abs__(s): return 0
            def __sub__(s, o): return s
            __rsub__ = __add__ = __pow__ = __mul__ = __sub__
            def __float__(s): return 0.0
            def __getitem__(s, i): return 3
            def __contains__(s, o): return True
            def __bool__(s): return True
            __hash__ = object.__hash__
        fake = types.ModuleType("math")
        fake.isclose = lambda *a, **k: True
        sys.modules["math"] = fake
        import builtins; builtins.abs = lambda x: 0
        def root2(x): return Omni()
        def pair(n): return Omni()
    """,
    # Rebinding the harness's own functions and tables from inside: it can only change what
    # "the function returned", which the parent then judges.
    "rebind-harness-and-tables": """
        import sys
        h = sys.modules["__main__"]
        h.encode = lambda v, depth=0: 3.0
        h.answer = lambda ns, name, args, kwargs: ["v", 3.0]
        h._NONFINITE.clear(); h._type_name = lambda t: "float"
        def root2(x): return "nope"
        def pair(n): return [n, n * n]      # a list where a tuple is expected
    """,
    # StopIteration would end `map` early and make `all(...)` vacuously true if re-raised as itself.
    "stop-iteration-empties-map": """
        def root2(x):
            raise StopIteration
        def pair(n): raise StopIteration
    """,
    # Forge replies on every descriptor and then die before the real answers.
    "forge-replies-and-exit": """
        import os
        for fd in range(3, 40):
            try: os.write(fd, b'["ready"]\\n' + b'["v",3.0]\\n' * 20)
            except OSError: pass
        os._exit(0)
    """,
}


# A forger that makes every call "return" 3.0 earns exactly what an honest program returning 3.0
# earns (root2(9) == 3.0 and root2(4) != 5 hold for it): no more.
CONSTANT = "def root2(x): return 3.0\ndef pair(n): return 3.0"


@pytest.mark.parametrize("name", list(FORGERIES), ids=list(FORGERIES))
def test_forgeries_earn_no_more_than_the_values_they_answer(name):
    v = verdict(FORGERIES[name], FORMS, partial)
    if name in ("rebind-harness-and-tables", "forge-replies-and-exit"):
        honest = verdict(CONSTANT, FORMS, partial)
        # never more than the honest constant program (the forged replies may also be lost
        # when the forger exits before the parent's request arrives)
        assert honest.score == 2 / 8 and v.score <= honest.score, (v.reason, honest.reason)
    else:
        assert v.score == 0.0, v.reason
    assert verdict(FORGERIES[name], FORMS).score == 0.0     # and the default reward gives 0


def test_hidden_test_sources_and_values_never_enter_the_sandbox():
    """The program dumps everything it can see of the harness's state into an exception message;
    none of the hidden test's source or expected value is there, and hidden reasons show no message."""
    spec = {"kind": "assert", "asserts": ["assert leak(1) == 1"],
            "hidden": ["assert leak(2) == 'HIDDEN-EXPECTED-41'"]}
    spy = """
        import gc, sys
        def leak(x):
            seen = repr([o for o in gc.get_objects() if isinstance(o, (str, bytes, dict))])
            seen += repr(sys.argv) + open('/proc/self/cmdline', 'rb').read().decode('latin-1')
            if x == 1:
                return 1
            raise ValueError('HIDDEN-EXPECTED-41' in seen and 'FOUND' or 'absent ' + seen[:100])
    """
    v = verdict(spy, spec, partial)
    assert v.score == 0.5 and v.reason == "passed 1/2; failed case 2 (hidden): raised ValueError"
    visible = {"kind": "assert", "asserts": ["assert leak(2) == 'HIDDEN-EXPECTED-41'"]}
    assert "absent" in verdict(spy, visible).reason     # shown for a visible case: not found


@pytest.mark.parametrize("test, why", [
    ("assert Solver().run(2) == 4", "uses .run of the candidate's Solver"),
    ("assert f.cache == {}", "uses .cache of the candidate's f"),
    ("assert apply(lambda x: x + 1, 2) == 3", "passes a function to apply()"),
], ids=["method-of-object", "attribute", "lambda-argument"])
def test_checks_that_cannot_be_decided_outside_are_refused_naming_the_test(test, why):
    spec = {"kind": "assert", "asserts": ["assert f(1) == 1", test]}
    src = "class Solver:\n    def run(self, x): return x * 2\ndef f(x): return x\ndef apply(g, x): return g(x)"
    with pytest.raises(ValueError, match="case 2") as info:
        reward([python_block(src)], tests=[spec])
    assert why in str(info.value)


# ---- a candidate named like a builtin ----------------------------------------------------------

MAX_SPEC = {"kind": "assert", "entry_point": "max", "asserts": ["assert max([1, 5, 2]) == 5"],
            "hidden": ["assert max([-3, -7]) == -3"]}


def test_a_candidate_named_like_a_builtin_is_the_one_called():
    honest = python_block("def max(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n"
                   "    return best")
    wrong = python_block("def max(xs):\n    return xs[0]")
    verdicts = reward.verdicts([python_block("pass"), honest, wrong], tests=[MAX_SPEC] * 3)
    assert [v.score for v in verdicts] == [0.0, 1.0, 0.0]
    assert verdicts[0].reason == "no function named max"
    assert verdicts[2].reason == "failed case 1: assertion failed"


def test_a_spec_that_never_calls_the_candidate_is_refused():
    with pytest.raises(ValueError, match="never calls a function of the candidate.*'entry_point'"):
        parse_spec({"kind": "assert", "asserts": ["assert sorted([2, 1]) == [1, 2]"]})


# Test code whose calls of the candidate are in code that never runs here: each passed every program, even
# one with no function at all, before a test that passes without calling the candidate was refused.
NEVER_RUNS = {
    "unittest-class": "import unittest\nfrom solution import f\n\nclass TestF(unittest.TestCase):\n"
                      "    def test_one(self):\n        self.assertEqual(f(1), 2)\n\n"
                      "if __name__ == '__main__':\n    unittest.main()\n",
    "pytest-class": "from solution import f\n\nclass TestF:\n    def test_one(self):\n        assert f(1) == 2\n",
    "uncalled-function": "def helper():\n    assert f(1) == 2\n",
    "main-block": "def test_one():\n    assert f(1) == 2\n\nif __name__ == '__main__':\n    test_one()\n",
}


@pytest.mark.parametrize("test", list(NEVER_RUNS.values()), ids=list(NEVER_RUNS))
def test_a_test_whose_calls_never_run_is_refused_not_passed(test):
    spec = {"kind": "assert", "asserts": ["import math", "assert f(0) == 1"], "hidden": [test]}
    with pytest.raises(ValueError, match="case 3 cannot be decided.*never runs here.*would pass every program"):
        reward([python_block("def f(x):\n    return x + 1")], tests=[spec])
    # a case that calls nothing of the candidate (setup) still passes beside one that does
    assert verdict("def f(x):\n    return x + 1", {**spec, "hidden": []}).reason == "passed 2/2"
    assert verdict("def f(x):\n    return x", {**spec, "hidden": []}).reason == "failed case 2: assertion failed"


# ---- SystemExit and other BaseExceptions do not satisfy pytest.raises(Exception) ---------------

RAISES_SPEC = {"kind": "assert", "asserts": ["import pytest\nwith pytest.raises(Exception):\n    f(-1)",
                                             "assert f(1) == 2"]}


def test_a_base_exception_does_not_satisfy_raises_exception():
    honest = python_block("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x + 1")
    programs = [honest] + [python_block(f"def f(x):\n    if x < 0:\n        raise {e}\n    return x + 1")
                           for e in ("SystemExit(3)", "KeyboardInterrupt", "GeneratorExit",
                                     "type('Mine', (BaseException,), {})('no')")]
    verdicts = reward.verdicts(programs, tests=[RAISES_SPEC] * len(programs))
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [v.reason for v in verdicts[1:]] == [
        "failed case 1: raised SystemExit: 3", "failed case 1: raised KeyboardInterrupt",
        "failed case 1: raised GeneratorExit", "failed case 1: raised Mine: no"]


def test_a_test_may_still_expect_a_builtin_exception():
    spec = {"kind": "assert", "asserts": ["import pytest\nwith pytest.raises(ZeroDivisionError):\n    f(0)"]}
    assert reward([python_block("def f(x):\n    return 1 / x"), python_block("def f(x):\n    return 0")],
                  tests=[spec] * 2) == [1.0, 0.0]
