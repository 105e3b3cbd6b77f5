import pytest
import torch

from rlvr.models import tiny_random


@pytest.fixture
def tiny():
    """A 2-layer random Llama and its character tokenizer."""
    model, tok = tiny_random(seed=0)
    model.eval()
    return model, tok


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # equivalence tests run on each


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture
def tiny_on(device):
    """The tiny model on each device present (the CPU always, CUDA when torch sees a GPU)."""
    model, tok = tiny_random(seed=0)
    model.to(device).eval()
    return model, tok


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
