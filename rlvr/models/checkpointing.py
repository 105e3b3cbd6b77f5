"""Gradient (activation) checkpointing of a policy's decoder layers: switched on, and whether the next forward
runs under it."""
from __future__ import annotations

import torch

from rlvr.models.lora import unwrap


def enable_gradient_checkpointing(policy) -> None:
    """Recompute each decoder layer's activations in the backward pass (non-reentrant checkpoint).

    Transformers drops the KV cache inside checkpointed layers (a recompute would append the prompt's
    keys twice), so completion_logprobs runs prompt + completion in full while it is on.
    """
    inner = unwrap(policy)
    if hasattr(inner, "activation_checkpointing_enable"):  # the name in the release rlvr pins (5.24)
        inner.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # earlier 5.x (5.17, the GPU machines' image)
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def checkpointing_active(model) -> bool:
    """True when the next forward of `model` will be checkpointed (and so runs without a cache)."""
    inner = unwrap(model)
    # the old name only where the new one is absent (earlier 5.x): reading it on 5.24 warns FutureWarning
    name = "is_activation_checkpointing" if hasattr(type(inner), "is_activation_checkpointing") else "is_gradient_checkpointing"
    return bool(getattr(inner, name, False)) and inner.training and torch.is_grad_enabled()
