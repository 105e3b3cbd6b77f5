"""Without bubblewrap, tests that need the code sandbox are skipped with the reason and what to install
(tests/sandbox_skip.py), and with it nothing is skipped (make test passes on a fresh machine)."""
import os
import shutil

import pytest

from rlvr.sandbox.run import Sandbox, sandbox_problem
from tests import sandbox_skip

pytest_plugins = ["pytester"]

INNER = '''
import pytest
from rlvr.rewards import make_code_tests

def test_scores_code_in_the_sandbox():
    reward = make_code_tests()
    assert reward(["```python\\nprint(1)\\n```"], tests=['{"kind": "stdio", "cases": [{"stdin": "", "stdout": "1"}]}']) == [1.0]

@pytest.mark.sandbox
def test_marked_run():
    assert False, "a whole run that reports the missing sandbox as an exit status"

def test_needs_no_sandbox():
    assert True
'''


@pytest.fixture
def fresh_cache():
    sandbox_skip._problem.cache_clear()
    yield
    sandbox_skip._problem.cache_clear()


def hide_bwrap(monkeypatch):
    """This process now finds no bubblewrap: not on PATH, not at /usr/bin/bwrap."""
    which, access = shutil.which, os.access
    monkeypatch.setattr(shutil, "which", lambda cmd, *a, **k: None if os.path.basename(cmd) == "bwrap"
                        else which(cmd, *a, **k))
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if str(path).endswith("bwrap")
                        else access(path, mode, *a, **k))


def run_inner(pytester):
    pytester.makeconftest("from tests.sandbox_skip import pytest_runtest_call, pytest_runtest_setup\n")
    pytester.makepyfile(test_inner=INNER)
    pytester.makeini("[pytest]\nmarkers =\n    sandbox: needs the sandbox\n")
    return pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")


def test_without_bubblewrap_sandbox_tests_skip_with_what_to_install(pytester, monkeypatch, fresh_cache):
    hide_bwrap(monkeypatch)
    monkeypatch.delenv("RLVR_UNSAFE_NO_SANDBOX", raising=False)
    assert "apt-get install bubblewrap" in sandbox_problem()
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*needs the code sandbox: bubblewrap not found*apt-get install bubblewrap*"])


@pytest.mark.skipif(sandbox_problem() is not None, reason="this machine has no working sandbox")
def test_with_bubblewrap_nothing_is_skipped_and_a_marked_failure_fails(pytester, fresh_cache):
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, failed=1)
    assert sandbox_problem(Sandbox()) is None
