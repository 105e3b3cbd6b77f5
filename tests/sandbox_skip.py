"""pytest hooks (imported by tests/conftest.py): where no sandbox can start (bubblewrap missing, or
unable to make namespaces), every test that needs one is skipped with the reason and what to install,
rather than failing, so that `make test` passes on a fresh machine. A test needs the sandbox when it
carries @pytest.mark.sandbox (whole runs through the CLI, which report the error as an exit status) or
raises SandboxUnavailable. Where the sandbox does work, nothing is skipped: a SandboxUnavailable there is
a real failure."""
import functools

import pytest

from rlvr.sandbox.run import SandboxUnavailable, sandbox_problem


@functools.lru_cache(maxsize=1)
def _problem() -> str | None:
    return sandbox_problem()


def skip_reason(problem: str) -> str:
    return f"needs the code sandbox: {problem} (make test installs it where it can: see the Makefile)"


def pytest_runtest_setup(item):
    if item.get_closest_marker("sandbox") and _problem() is not None:
        pytest.skip(skip_reason(_problem()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except SandboxUnavailable:
        if _problem() is None:
            raise
        pytest.skip(skip_reason(_problem()))
