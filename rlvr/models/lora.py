"""LoRA adapters on a policy (PEFT), the one `unwrap` of the wrappers around a model (DDP, FSDP, PEFT), and
SeededDropout: dropout masks (LoRA's among them) drawn from the update's seeded generator."""
from __future__ import annotations

import warnings

import torch

from rlvr.errors import RlvrError


def is_peft(model) -> bool:
    """True for a PEFT-wrapped model (LoRA adapters)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def unwrap(model):
    """The transformers model inside DDP / FSDP1 (`.module`) and PEFT wrappers (the LoRA layers stay in
    it: the adapters live inside its layers); `model` itself when it is not wrapped."""
    while hasattr(model, "module"):
        model = model.module
    return model.get_base_model() if is_peft(model) else model


def apply_lora(policy, lora):
    """Wrap `policy` with PEFT LoRA adapters (`lora`: config.LoraConfig, r > 0); only adapters train.

    The base weights stay frozen, so the KL reference is the same model with its adapters disabled
    (rlvr.train.forward.Reference) and no second copy is held.
    """
    try:
        from peft import LoraConfig, TaskType, get_peft_model
    except ImportError as e:
        raise RlvrError("model.lora.r > 0 needs the peft package: pip install 'rlvr[lora]'") from e
    if lora.r <= 0:
        raise RlvrError(f"apply_lora needs model.lora.r > 0, got {lora.r}")
    inner = unwrap(policy)
    names = {n.rsplit(".", 1)[-1] for n, _ in inner.named_modules()}
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in inner.named_modules()
                     if isinstance(m, torch.nn.Linear) and m is not inner.get_output_embeddings()})
    targets = linear if lora.target_modules == "all-linear" else list(lora.target_modules)
    missing = [t for t in targets if t not in names]
    if missing:
        raise RlvrError(f"model.lora.target_modules {missing} are not modules of this model; "
                        f"its linear layers are: {', '.join(linear)} (and the output head)")
    cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                     target_modules=targets, task_type=TaskType.CAUSAL_LM)
    with warnings.catch_warnings():  # PEFT reads transformers' deprecated alias: a warning no user can act on
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        model = get_peft_model(policy, cfg)
    seeded_dropouts(model)
    return model


class SeededDropout(torch.nn.Dropout):
    """nn.Dropout whose masks come from `generator` (set by seeded_dropouts; None: the global RNG, as
    nn.Dropout). The global RNG is shared by every thread: under rollout.overlap=one_step_off the HF engine
    seeds and draws from it on the collecting thread while the update runs, so masks drawn from it would
    depend on how the two threads interleave."""

    generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or self.generator is None:
            return super().forward(x)
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)  # as F.dropout draws it
        return x * keep.div_(1 - self.p)


def seeded_dropouts(model: torch.nn.Module, seed: int | None = None) -> None:
    """Every nn.Dropout of `model` (LoRA's lora_dropout among them) made a SeededDropout; with `seed`, all of
    them then draw, in the order the forward reaches them, from one generator seeded `seed` on the model's
    device (the update seeds it per step: rlvr.train.update.policy_update)."""
    generator = None
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.__class__ = SeededDropout
            if seed is not None:
                if generator is None:
                    device = next(model.parameters()).device
                    generator = torch.Generator(device=device).manual_seed(seed)
                module.generator = generator
