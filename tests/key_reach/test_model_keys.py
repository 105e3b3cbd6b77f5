"""Key reach, the models: each key of MODELS changes how the policy's weights are held as it promises
(tests/key_reach/harness.py says how a check is made)."""
from dataclasses import dataclass

import pytest
import torch

from rlvr.models import load_model
from rlvr.train.assemble import models_of
from rlvr.train.distributed import Dist

from tests.key_reach.harness import _cfg, cached, check


@dataclass
class Built:
    held: dict  # name -> (dtype, tensor type) of each weight
    checkpointing: bool

    def key(self) -> tuple:
        return sorted(set(self.held.values())), self.checkpointing


def models_observable(overrides) -> Built:
    """What each weight is held as (dtype, tensor type), gradient checkpointing."""
    cfg = _cfg(*overrides)
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, quantize=cfg.model.quantize)
    m = models_of(cfg, policy, tok, Dist(), "no")
    held = {n: (p.dtype, type(p.data).__name__) for n, p in m.policy.named_parameters()}
    return Built(held, bool(getattr(m.policy, "is_gradient_checkpointing", False)))


def bf16_weights(base: Built, changed: Built) -> None:
    """Every weight held in bfloat16 (the base: float32)."""
    assert {d for d, _ in base.held.values()} == {torch.float32}
    assert {d for d, _ in changed.held.values()} == {torch.bfloat16}


def checkpointing(base: Built, changed: Built) -> None:
    assert (base.checkpointing, changed.checkpointing) == (False, True)


def nf4(base: Built, changed: Built) -> None:
    """The base's linear layers are 4-bit NormalFloat (NF4Tensor); embeddings and adapters are not."""
    kinds = {n: t for n, (_, t) in changed.held.items()}
    linear = [n for n in kinds if n.endswith("proj.base_layer.weight") or n.endswith("proj.weight")]
    assert linear and all(kinds[n] == "NF4Tensor" for n in linear if "lora_" not in n), kinds
    assert all(kinds[n] != "NF4Tensor" for n in kinds if "embed" in n or "lora_" in n)
    assert "NF4Tensor" not in {t for _, t in base.held.values()}


MODELS = {
    "model.dtype": ("bfloat16", (), bf16_weights),
    "train.gradient_checkpointing": (True, (), checkpointing),
    "model.quantize": ("nf4", ("--model.lora.r=4",), nf4),
}


@pytest.fixture(scope="module")
def built():
    return cached(models_observable)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(MODELS))
def test_model_key_does_what_it_promises(built, key):
    check(MODELS, key, models_observable, built, "the run's models")
