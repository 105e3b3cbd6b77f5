"""Clipped surrogate policy loss, value loss and loss aggregation: tensors in, tensors out."""
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


def sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ratio (Zheng et al. 2025) in its token form: value exp(mean_t(logp - old_logp)) for every
    token of a sequence, gradient s_i * d logp_t per token (sg[s_i] * exp(logp_t - sg[logp_t])). [B, T]."""
    m = mask.to(logp.dtype)
    log_s = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)  # [B]
    return torch.exp(log_s.detach())[:, None] * torch.exp(logp - logp.detach())  # [B, T]


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float | None = None,
                ratio_level: str = "token", aggregation: str = "token-mean",
                norm_length: int | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate, max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), aggregated to a scalar.

    logp, old_logp, mask: [B, T]; advantages: [B] (broadcast over tokens) or [B, T].
    dual_clip=c bounds the loss of negative-advantage tokens by -A c (Ye et al. 2020).
    ratio_level="sequence" is GSPO. Metrics (0-dim tensors): clip fractions (low, high, dual),
    approximate KL to the old policy, ratio mean / min / max.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)  # [B, T]
    if ratio_level == "token":
        ratio = torch.exp(logp - old_logp)  # [B, T]
    elif ratio_level == "sequence":
        ratio = sequence_ratio(logp, old_logp, mask)
    else:
        raise ValueError(f"ratio_level must be token or sequence, got {ratio_level!r}")
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # [B, T]
    dual = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip is not None:
        bound = -advantages * dual_clip  # [B, T]
        dual = (advantages < 0) & (loss > bound)
        loss = torch.where(advantages < 0, torch.minimum(loss, bound), loss)
    m = mask.bool()
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        r = ratio[m] if m.any() else ratio.new_ones(1)
        metrics = {
            "clip/low_frac": ((ratio < 1 - clip_low) & (advantages < 0) & m).sum() / n,
            "clip/high_frac": ((ratio > 1 + clip_high) & (advantages > 0) & m).sum() / n,
            "clip/dual_frac": (dual & m).sum() / n,
            "ratio/mean": r.mean(), "ratio/min": r.min(), "ratio/max": r.max(),
            "approx_kl_old": (0.5 * (logp - old_logp).pow(2) * m).sum() / n,
        }
    return aggregate(loss, mask, aggregation, norm_length), metrics


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float | None = 0.2, aggregation: str = "token-mean") -> torch.Tensor:
    """Clipped value loss (PPO): 0.5 max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2). [B, T] -> scalar."""
    err = (values - returns).pow(2)
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns).pow(2))
    return aggregate(0.5 * err, mask, aggregation)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each row's categorical distribution: [..., V] -> [...]."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)
