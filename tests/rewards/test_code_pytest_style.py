"""Pytest-style test code (`pytest.raises`, `pytest.approx`, KodCode's `from solution import f` with
`def test_...()` functions) judged in the parent whether or not pytest is installed beside the trainer;
test code that imports a module this interpreter lacks is the environment's error, never a candidate's 0."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rlvr.rewards.code import pytest_compat
from rlvr.rewards.audit import code_findings
from rlvr.rewards.code.checks import MissingModule
from rlvr.rewards.code import make_code_tests, parse_spec
from rlvr.tasks import Problem, Splits

reward = make_code_tests(timeout_s=2.0)


def block(src: str) -> str:
    return "```python\n" + textwrap.dedent(src).strip() + "\n```"


KODCODE = {"kind": "assert", "asserts": [textwrap.dedent("""
    from solution import mean, safe_div as div
    import pytest

    def test_mean():
        assert mean([1, 2, 3, 4]) == pytest.approx(2.5)
        assert mean([0.1, 0.2]) == pytest.approx(0.15)

    def test_div():
        assert div(7, 2) == 3.5
        with pytest.raises(ZeroDivisionError, match="zero"):
            div(1, 0)
    """), "import solution\nassert solution.mean([5]) == 5"]}
RIGHT = block("""
    def mean(xs):
        return sum(xs) / len(xs)
    def safe_div(a, b):
        if b == 0:
            raise ZeroDivisionError("division by zero")
        return a / b
""")


def test_kodcode_style_tests_pass_a_right_program():
    v = reward.verdict(RIGHT, KODCODE)
    assert (v.score, v.reason) == (1.0, "passed 2/2")


@pytest.mark.parametrize("program,reason", [
    (RIGHT.replace("sum(xs) / len(xs)", "sum(xs) // len(xs)"), "failed case 1: assertion failed"),
    (RIGHT.replace('raise ZeroDivisionError("division by zero")', "return 0"),
     "failed case 1: test raised Failed: DID NOT RAISE ZeroDivisionError"),
    (RIGHT.replace('"division by zero"', '"bad input"'), "failed case 1: test raised Failed: Regex pattern"),
    (RIGHT.replace("def safe_div", "def other_div"), "no function named safe_div"),
])
def test_kodcode_style_tests_fail_a_wrong_program(program, reason):
    v = reward.verdict(program, KODCODE)
    assert v.score == 0.0 and v.reason.startswith(reason), v.reason


def test_every_test_function_runs_not_only_the_first():
    spec = {"kind": "assert", "asserts": ["from solution import f\ndef test_a():\n    assert f(1) == 2\n"
                                          "def test_b():\n    assert f(10) == 11\n"]}
    assert reward([block("def f(x):\n    return x + 1"), block("def f(x):\n    return 2 if x == 1 else 0")],
                  tests=[spec] * 2) == [1.0, 0.0]


def test_the_compat_module_follows_pytest():
    assert 0.1 + 0.2 == pytest_compat.approx(0.3) and 1.0 + 2e-6 != pytest_compat.approx(1.0)
    assert [1.0, {"a": 2.0}] == pytest_compat.approx([1.0 + 1e-9, {"a": 2.0}])
    assert 1.05 == pytest_compat.approx(1.0, abs=0.1) and 1.05 != pytest_compat.approx(1.0, abs=0.01)
    assert 110 == pytest_compat.approx(100, rel=0.1) and float("nan") != pytest_compat.approx(float("nan"))
    with pytest_compat.raises(ValueError, match="neg") as info:
        raise ValueError("negative")
    assert str(info.value) == "negative"
    with pytest.raises(pytest_compat.Failed, match="DID NOT RAISE KeyError or IndexError"):
        with pytest_compat.raises((KeyError, IndexError)):
            pass
    with pytest.raises(TypeError):   # not the expected exception: it goes on
        with pytest_compat.raises(ValueError):
            raise TypeError("other")
    assert issubclass(pytest_compat.Failed, BaseException) and not issubclass(pytest_compat.Failed, Exception)


def test_pytest_parts_without_a_counterpart_are_refused_when_parsed():
    spec = {"kind": "assert", "asserts": ["import pytest\n@pytest.mark.parametrize('x', [1])\n"
                                          "def test_f(x):\n    assert f(x) == 2"]}
    with pytest.raises(ValueError, match="case 1 uses pytest.mark; test code may use pytest.raises"):
        parse_spec(spec)
    spec = {"kind": "assert", "asserts": ["from solution import f\ndef test_f(tmp_path):\n    assert f(1) == 2"]}
    with pytest.raises(ValueError, match="defines test_f with parameters or decorators"):
        parse_spec(spec)


MISSING = {"kind": "assert", "asserts": ["import rlvr_no_such_module_xyz\nassert f(1) == 2"]}


def test_a_missing_module_is_an_environment_error_naming_the_install_line():
    with pytest.raises(MissingModule, match=r"imports rlvr_no_such_module_xyz, which the interpreter that runs "
                                            r"test code \(.*\) lacks: install it beside rlvr \(`.* -m pip install "
                                            r"rlvr_no_such_module_xyz`\)"):
        reward([block("def f(x):\n    return x + 1")], tests=[MISSING])


def test_audit_reports_a_missing_module():
    found = code_findings(Splits(train=[Problem(question="write f", answer="", tests=json.dumps(MISSING))] * 2,
                                 heldout=[], ood=[]))
    assert len(found) == 1 and found[0].startswith(
        "train: 2 code specs import a module the test-code interpreter lacks: rlvr_no_such_module_xyz")


@pytest.mark.slow  # a fresh interpreter and judge worker
def test_pytest_style_tests_run_where_pytest_cannot_be_imported(tmp_path):
    (tmp_path / "pytest.py").write_text("raise ImportError('pytest is not installed here')\n")
    programs = [RIGHT, RIGHT.replace("sum(xs) / len(xs)", "0")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    run = subprocess.run([sys.executable, "-c",
                          "import json, sys\nfrom rlvr.rewards.code import make_code_tests\n"
                          "r = make_code_tests(timeout_s=2.0)\n"
                          "print(json.dumps([v.score for v in r.verdicts(json.loads(sys.argv[1]), "
                          "tests=[json.loads(sys.argv[2])] * 2)]))",
                          json.dumps(programs), json.dumps(KODCODE)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == [1.0, 0.0]


def test_training_refuses_specs_whose_test_code_cannot_import():
    from rlvr.errors import RlvrError
    from rlvr.rewards.preflight import check_test_modules

    check_test_modules([Problem(question="write f", answer="", tests=json.dumps(KODCODE))])
    with pytest.raises(RlvrError, match="1 problems' test code cannot run here; the first: tests spec .* imports "
                                        "rlvr_no_such_module_xyz"):
        check_test_modules([Problem(question="write f", answer="", tests=json.dumps(KODCODE)),
                            Problem(question="g", answer="", tests=json.dumps(MISSING))])
