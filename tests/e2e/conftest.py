from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    """Everything here is a whole run: the slow tier (make test runs it, make test-fast does not)."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.slow)
