"""Clipped surrogate policy loss and loss aggregation: tensors in, tensors out."""
from __future__ import annotations

import torch


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm_length: int | None = None) -> torch.Tensor:
    """Reduce a per-token loss [B, T] under mask [B, T] to a scalar.

    token-mean: sum over unmasked tokens / their count (DAPO).
    seq-mean-token-mean: mean over each sequence's tokens, then over sequences that have any (GRPO).
    seq-mean-token-sum-norm: each sequence's token sum / norm_length (default T), mean over sequences (Dr. GRPO).
    """
    mask = mask.to(loss.dtype)
    if mode == "token-mean":
        return (loss * mask).sum() / mask.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        tokens = mask.sum(-1)  # [B]
        seq = (loss * mask).sum(-1) / tokens.clamp(min=1)  # [B]
        has = (tokens > 0).to(loss.dtype)
        return (seq * has).sum() / has.sum().clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        length = norm_length if norm_length is not None else loss.shape[-1]
        return ((loss * mask).sum(-1) / length).mean()
    raise ValueError(f"unknown aggregation {mode!r}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.2) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate per token: max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)).

    logp, old_logp, mask: [B, T]; advantages: [B] (broadcast over tokens) or [B, T].
    Returns (per-token loss [B, T], metrics of 0-dim tensors: clip fractions and ratio statistics).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]  # [B, 1]
    ratio = torch.exp(logp - old_logp)  # [B, T]
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # [B, T]
    m = mask.bool()
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        r = ratio[m] if m.any() else ratio.new_ones(1)
        metrics = {
            "clip/low_frac": ((ratio < 1 - clip_low) & (advantages < 0) & m).sum() / n,
            "clip/high_frac": ((ratio > 1 + clip_high) & (advantages > 0) & m).sum() / n,
            "ratio/mean": r.mean(), "ratio/min": r.min(), "ratio/max": r.max(),
            "approx_kl_old": (0.5 * (logp - old_logp).pow(2) * m).sum() / n,
        }
    return loss, metrics
