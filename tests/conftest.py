import pytest
import torch

from rlvr.models import tiny_random
from tests.sandbox_skip import pytest_runtest_call, pytest_runtest_setup  # noqa: F401 (hooks: skip without a sandbox)


@pytest.fixture
def tiny():
    """A 2-layer random Llama and its character tokenizer."""
    model, tok = tiny_random(seed=0)
    model.eval()
    return model, tok


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
