import pytest
import torch

from rlvr.models import tiny_random


@pytest.fixture
def tiny():
    """A 2-layer random Llama and its character tokenizer."""
    model, tok = tiny_random(seed=0)
    model.eval()
    return model, tok


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
