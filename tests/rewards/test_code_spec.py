"""Test specs (rlvr.rewards.code.spec): malformed ones raise naming what is wrong, assert cases are
compiled for the parent, the prelude's __future__ imports are hoisted."""
import pytest

from rlvr.rewards.code import make_code_tests
from rlvr.rewards.code.spec import parse_spec, with_prelude
from tests.conftest import python_block

reward = make_code_tests(timeout_s=1.0)


@pytest.mark.parametrize("spec, message", [
    ("{not json", "not valid JSON"),
    ([1, 2], "must be a JSON object"),
    ({"cases": []}, "missing key 'kind'"),
    ({"kind": "shell", "cases": []}, "unknown kind 'shell'"),
    ({"kind": "stdio"}, r"\(stdio\) is missing key 'cases'"),
    ({"kind": "stdio", "cases": [{"stdin": "1"}]}, "case 1 is missing key 'stdout'"),
    ({"kind": "stdio", "cases": [{"stdout": 3}]}, "must be strings"),
    ({"kind": "stdio", "cases": [{"stdout": "3"}], "hiden": []}, "unknown keys \\['hiden'\\]"),
    ({"kind": "stdio", "cases": []}, "has no cases"),
    ({"kind": "function", "cases": [{"args": [], "expected": 1}]}, "missing key 'entry_point'"),
    ({"kind": "function", "entry_point": "f", "cases": [{"args": [1]}]}, "case 1 is missing key 'expected'"),
    ({"kind": "function", "entry_point": "f", "cases": [{"args": 1, "expected": 1}]}, "'args' must be a list"),
    ({"kind": "assert", "cases": ["assert 1"]}, "missing key 'asserts'"),
    ({"kind": "assert", "asserts": [3]}, "case 1 must be a string"),
    ({"kind": "assert", "asserts": ["assert f(1) =="]}, "case 1 does not parse"),
    ({"kind": "assert", "asserts": ["assert f(1)"], "prelude": 3}, r"\(assert\) key 'prelude' must be a string"),
    ({"kind": "stdio", "cases": [{"stdout": "1"}], "prelude": "def g(:"},
     r"\(stdio\) key 'prelude' does not parse: .* \(line 1\)"),
], ids=["bad-json", "not-object", "no-kind", "bad-kind", "no-cases", "no-stdout", "non-string-stdout",
        "unknown-key", "empty", "no-entry-point", "no-expected", "args-not-list", "no-asserts",
        "assert-not-str", "assert-syntax", "prelude-not-str", "prelude-syntax"])
def test_malformed_specs_raise_clearly(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)
    with pytest.raises(ValueError, match=message):
        reward([python_block("print(1)")], tests=[spec])


def test_assert_tests_are_compiled_for_the_parent_with_literal_calls_prefetched():
    spec = parse_spec({"kind": "assert", "asserts": ["assert f(1) == [1, {'a': None}]", "assert 2 == g()",
                                                     "assert abs(f(2, k=(1, 2)) - 1.4) < 1e-9",
                                                     "import math\nassert math.isclose(f(x), 2)"]})
    tests = [c.test for c in spec.cases]
    assert [sorted(t.names) for t in tests] == [["f"], ["g"], ["f"], ["f", "x"]]
    assert tests[0].prefetch == ('["f",[1],{"d":[]}]',) and tests[1].prefetch == ('["g",[],{"d":[]}]',)
    assert tests[2].prefetch == ('["f",[2],{"d":[["k",{"t":[1,2]}]]}]',)   # the tuple stays a tuple
    assert tests[3].prefetch == ()                                          # x is not a literal


def test_with_prelude_hoists_future_imports():
    assert with_prelude("", "x = 1") == "x = 1"
    assert with_prelude("import os", "from __future__ import annotations\nx = 1") == \
        "from __future__ import annotations\nimport os\n\nx = 1"
