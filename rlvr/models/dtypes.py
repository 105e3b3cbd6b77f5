"""The dtype a model's weights are loaded in: model.dtype resolved (auto: the checkpoint's own, bf16 on CUDA),
and the dtype a model directory says its weights are stored in."""
from __future__ import annotations

import json
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def checkpoint_dtype(path: Path) -> str | None:
    """The dtype a model directory's config.json says its weights are stored in (transformers writes
    `dtype`, older releases `torch_dtype`), None where it says none."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    stored = config.get("dtype") or config.get("torch_dtype")
    return stored if isinstance(stored, str) else None


def weight_dtype(dtype: str, stored: str | None, device: torch.device) -> torch.dtype:
    """model.dtype resolved: float32 and bfloat16 as named; auto is the checkpoint's own dtype where it is
    bf16 (weights as users load them: no fp32 copy of a bf16 checkpoint), and bf16 on CUDA for an fp32,
    fp16 or unstated one; on the CPU those stay fp32 (the laptop path learns as it always did). fp16 is
    never trained in: its range needs loss scaling, which bf16 does not."""
    if dtype != "auto":
        return DTYPES[dtype]
    if stored == "bfloat16" or device.type == "cuda":
        return torch.bfloat16
    return torch.float32
