"""The masks and widths of a rollout batch, each computed here only: tensors in, tensors out."""
from __future__ import annotations

import torch


def present_tokens(completion_mask: torch.Tensor, env_mask: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] every real token after the prompt: the model's (completion_mask [B, T]) and, in multi-turn
    episodes, the environment's (env_mask [B, T], attended as context, never in the loss)."""
    return completion_mask if env_mask is None else completion_mask + env_mask


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """mask [B, T] -> bool [B, T], true at each row's last unmasked token (where a sequence reward lands);
    a row with no unmasked token has none."""
    return (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()


def row_widths(present: torch.Tensor) -> torch.Tensor:
    """present [B, T] -> long [B]: the index after each row's last real token (0 for an empty row)."""
    if not present.shape[1]:
        return present.new_zeros(present.shape[0]).long()
    positions = torch.arange(1, present.shape[1] + 1, device=present.device)  # [T]
    return (present.bool() * positions).amax(-1)
