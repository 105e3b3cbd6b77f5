"""A 4-bit base for LoRA (QLoRA, Dettmers et al. 2023): the frozen linear weights held as NF4 (model.quantize=nf4).

torchao's NF4Tensor, the format torchtune's QLoRA uses: each block of 64 weights is stored as 4-bit indices
into the 16 NormalFloat levels (quantiles of a normal distribution, scaled to [-1, 1]) times the block's
absmax, and the absmaxes themselves as int8 (double quantisation, one scale per 256 of them, around their
mean): about 4.13 bits a weight. A layer keeps its plain nn.Linear; only its weight is an NF4Tensor, which
F.linear dequantises to the input's dtype on the fly (forward and backward, never a gradient of its own),
so PEFT's LoRA wraps it as any linear layer, the reference (adapters off) and the rollout engine read the
same 4-bit weights, and nothing holds a full-precision copy of them.

Why torchao rather than bitsandbytes (both work on this CPU): NF4Tensor is a pure-PyTorch tensor subclass
(no native library on the CPU, the same code on every device, and FSDP2's all-gather hooks in the class),
its wheel is 3.4 MB against 43 MB, and the same package holds the 8-bit AdamW and the optimizer-state offload
that rlvr/train/optim.py offers. torchao is imported only when one of them is asked for.

The output projection and the embeddings stay in model.dtype (QLoRA's choice too: they are a small share
of a large model's weights and the most sensitive to rounding).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from rlvr.errors import RlvrError

BLOCK = 64  # weights per absmax block (QLoRA's and torchao's default)
SCALER_BLOCK = 256  # absmaxes per int8 scale of the double quantisation (the default), or a divisor of it
# The 16 NF4 levels (QLoRA's Appendix E; torchao's table): half the widest gap (-1 to -0.6962) bounds the rounding
LEVELS = (-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0, 0.0796, 0.1609, 0.2461, 0.3379,
          0.4407, 0.5626, 0.7230, 1.0)
HALF_GAP = max(b - a for a, b in zip(LEVELS, LEVELS[1:])) / 2  # 0.1519: a weight's error over its block's absmax


def _torchao():
    try:
        from torchao.quantization import NF4Tensor, to_nf4
    except ImportError as e:
        raise RlvrError("model.quantize=nf4 needs torchao: pip install --no-deps torchao==0.18.0 "
                        "(its one other need is numpy)") from e
    return NF4Tensor, to_nf4


def is_nf4(t: torch.Tensor) -> bool:
    return type(t).__name__ == "NF4Tensor"


def quantizable(module: nn.Module) -> bool:
    """A linear layer whose weight splits into whole 64-weight blocks."""
    return isinstance(module, nn.Linear) and module.weight.numel() % BLOCK == 0


def to_nf4(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [N, K] as an NF4Tensor of the same shape and dtype (the dtype its dequantised form takes).
    The double quantisation groups 256 block absmaxes per scale where the block count allows, else the
    largest power-of-two divisor of it (small test models)."""
    _, convert = _torchao()
    blocks = weight.numel() // BLOCK
    return convert(weight.detach().contiguous(), BLOCK, math.gcd(blocks, SCALER_BLOCK))


@torch.no_grad()
def quantize_base(model: nn.Module, device: torch.device | str | None = None) -> int:
    """Replace the weight of every quantizable linear layer of `model` but its output projection by its NF4
    form, made on `device` (the model's own when None), frozen; returns how many layers. Each layer is
    quantised on its own, so a model loaded on the host reaches the GPU 4-bit, never whole in bf16."""
    head = model.get_output_embeddings()
    count = 0
    for module in model.modules():
        if module is head or not quantizable(module) or is_nf4(module.weight):
            continue
        w = module.weight.to(device) if device is not None else module.weight
        module.weight = nn.Parameter(to_nf4(w), requires_grad=False)
        count += 1
    if count == 0:
        raise RlvrError("model.quantize=nf4 found no linear layer to quantise (each needs a multiple of 64 weights)")
    return count


def dequantized(weight: torch.Tensor) -> torch.Tensor:
    """An NF4 weight as a plain tensor of its dtype (a merged model to save); any other tensor as it is."""
    return weight.get_original_weight() if is_nf4(weight) else weight


@torch.no_grad()
def dequantize_base(model: nn.Module) -> None:
    """Every NF4 weight of `model` replaced by its dequantised values as a plain frozen parameter: the base a
    LoRA run on a 4-bit base trained its adapters on, in a form they merge into (a run's final/)."""
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if is_nf4(p):
                setattr(module, name, nn.Parameter(dequantized(p), requires_grad=False))


def weight_bytes(model: nn.Module) -> int:
    """Bytes the model's parameters and buffers hold, an NF4 weight counted by its packed parts."""
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if is_nf4(t):
            total += sum(getattr(t, a).numel() * getattr(t, a).element_size() for a in t.__tensor_flatten__()[0])
        else:
            total += t.numel() * t.element_size()
    return total
