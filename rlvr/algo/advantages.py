"""Advantages from rewards: tensors in, tensors out."""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (Shao et al. 2024, eq. 3): rewards [P, G] -> [P, G].

    group: (r - group mean) / (group std + eps); batch: (r - group mean) / (std of all rewards + eps);
    none: r - group mean (Dr. GRPO). Std is the unbiased sample std; a group of one gets 0.
    """
    p, g = rewards.shape
    if g < 2:
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [P, G]
    if scale == "none":
        return centred
    if scale == "group":
        return centred / (rewards.std(dim=1, keepdim=True) + eps)  # [P, G]
    if scale == "batch":
        return centred / (rewards.std() + eps)
    raise ValueError(f"scale must be group, batch or none, got {scale!r}")
