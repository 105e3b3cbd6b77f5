from pathlib import Path

import pytest

from rlvr.cli import main

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    """Everything here is a whole run: the slow tier (make test runs it, make test-fast does not)."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def learning(tmp_path_factory) -> list[str]:
    """test_resume's run with a reward that varies within groups (tests/e2e/test_run_faults.py:learning_run)."""
    from tests.e2e.test_run_faults import learning_run

    return learning_run(tmp_path_factory.mktemp("reward"))


@pytest.fixture(scope="session")
def learning_alone(tmp_path_factory, learning) -> Path:
    """The learning run left alone, the value-for-value reference of the fault tests (test_run_faults,
    test_full_disk): one run, read and never written by them (each copies what it changes)."""
    from tests.e2e.test_resume import read_jsonl

    out = tmp_path_factory.mktemp("alone") / "run"
    assert main(["train", *learning, f"--train.out={out}"]) == 0
    kl = [m["kl"] for m in read_jsonl(out / "metrics.jsonl")]
    assert kl[0] == 0.0 and kl[1] > 0  # the policy moved away from the reference at step 1
    return out
