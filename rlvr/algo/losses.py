"""Importance ratios, the clipped surrogate (rlvr.algo.policy.policy_loss picks the objective), value loss,
loss aggregation and its normaliser: tensors in, tensors out."""
from __future__ import annotations

import torch


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum")
# Every log importance ratio is clamped to +-this before exp (torchtitan's DAPO loss clamps its
# log-ratio too): e^20 ~ 5e8 is far past any clip range, yet a -inf log-prob or a diverged token makes no inf.
LOG_RATIO_LIMIT = 20.0


def loss_units(mask: torch.Tensor, mode: str) -> torch.Tensor:
    """What `mode` averages over in mask [B, T]: its real tokens (token-mean), or its sequences with at
    least one real token (the seq-mean modes). A 0-dim float tensor."""
    if mode == "token-mean":
        return mask.float().sum()
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum"):
        return (mask.sum(-1) > 0).float().sum()
    raise ValueError(f"unknown aggregation {mode!r}")


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm_length: int | None = None,
              units: float | torch.Tensor | None = None) -> torch.Tensor:
    """Reduce a per-token loss [B, T] under mask [B, T] to a scalar: a sum over this batch divided by `units`.

    token-mean: sum over real tokens / their number (DAPO).
    seq-mean-token-mean: each sequence's mean over its tokens, then the mean over sequences (GRPO).
    seq-mean-token-sum-norm: each sequence's token sum / norm_length (default T), then the mean over
    sequences (Dr. GRPO). verl's agg_loss in its first form divides the sum over all rows by the mask's
    width and not by their number, so its scale grows with the batch; here it does not.
    seq-mean-token-sum: each sequence's token sum, then the mean over sequences (LUSPO, arXiv 2602.05261:
    a sequence-ratio loss that longer answers do not dilute; TRL's `luspo`).
    The seq-mean modes count only sequences with a real token: a fully masked row (a truncated
    completion under algo.mask_truncated) neither adds to nor dilutes the mean.

    units: the whole batch's `loss_units` when `loss` is one part of it (a micro-batch, one rank's
    shard), as torchtitan passes the global token count: the parts' results then sum to the whole
    batch's. Default: this batch's own units.
    """
    m = mask.to(loss.dtype)
    if mode == "token-mean":
        total = (loss * m).sum()
    elif mode == "seq-mean-token-mean":
        total = ((loss * m).sum(-1) / m.sum(-1).clamp(min=1)).sum()
    elif mode == "seq-mean-token-sum-norm":
        total = (loss * m).sum() / (norm_length if norm_length is not None else loss.shape[-1])
    elif mode == "seq-mean-token-sum":
        total = (loss * m).sum()
    else:
        raise ValueError(f"unknown aggregation {mode!r}")
    units = loss_units(mask, mode) if units is None else units
    return total / max(float(units), 1.0)


def sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ratio (Zheng et al. 2025) in its token form: value exp(mean_t(logp - old_logp)) for every
    token of a sequence, gradient s_i * d logp_t per token (sg[s_i] * exp(logp_t - sg[logp_t])). [B, T]."""
    m = mask.to(logp.dtype)
    log_s = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)  # [B]
    log_s = log_s.detach().clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(log_s)[:, None] * torch.exp(logp - logp.detach())  # [B, T]


def policy_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str = "token"
                 ) -> torch.Tensor:
    """The importance ratio pi / pi_old [B, T]: per token (log r clamped to +-LOG_RATIO_LIMIT, no gradient
    beyond), or GSPO's sequence ratio spread over its tokens (`sequence_ratio`)."""
    if level == "token":
        return torch.exp((logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))  # [B, T]
    if level == "sequence":
        return sequence_ratio(logp, old_logp, mask)
    raise ValueError(f"ratio_level must be token or sequence, got {level!r}")


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.2,
                      dual_clip: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token loss max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)); dual_clip=c bounds the loss
    of negative-advantage tokens by -A c (Ye et al. 2020). ratio, advantages [B, T] -> (loss [B, T], where
    the dual clip acted [B, T] bool)."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # [B, T]
    dual = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        bound = -advantages * dual_clip  # [B, T]
        dual = (advantages < 0) & (loss > bound)
        loss = torch.where(advantages < 0, torch.minimum(loss, bound), loss)
    return loss, dual


def ratio_metrics(logp: torch.Tensor, old_logp: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, clip_low: float, clip_high: float, dual: torch.Tensor
                  ) -> dict[str, torch.Tensor]:
    """Clip fractions (low, high, dual), approximate KL to the old policy and ratio mean, each over the real
    tokens of mask [B, T] (weight by their number to combine batches), and ratio min / max: 0-dim tensors,
    no host reads."""
    m = mask.bool()
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        ratio_m = ratio.expand_as(m)
        one, any_token = ratio.new_ones(()), m.any()  # ratio statistics are 1 when no token is real
        return {
            "clip/low_frac": ((ratio < 1 - clip_low) & (advantages < 0) & m).sum() / n,
            "clip/high_frac": ((ratio > 1 + clip_high) & (advantages > 0) & m).sum() / n,
            "clip/dual_frac": (dual & m).sum() / n,
            "ratio/mean": torch.where(any_token, (ratio_m * m).sum() / n, one),
            "ratio/min": torch.where(any_token, torch.where(m, ratio_m, float("inf")).amin(), one),
            "ratio/max": torch.where(any_token, torch.where(m, ratio_m, float("-inf")).amax(), one),
            "approx_kl_old": (0.5 * (logp - old_logp).pow(2) * m).sum() / n,
        }


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float | None = 0.2, units: float | torch.Tensor | None = None) -> torch.Tensor:
    """Clipped value loss (PPO): 0.5 max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2), the mean over
    real tokens whatever the policy's aggregation (units: the whole batch's token count, see aggregate).
    [B, T] -> scalar."""
    err = (values - returns).pow(2)
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns).pow(2))
    return aggregate(0.5 * err, mask, "token-mean", units=units)


def drop_nonfinite(sampler_logp: torch.Tensor, mask: torch.Tensor, context: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Tokens whose sampler log-prob is -inf or nan (vLLM can return one) leave the loss: they move
    from the loss mask to the context mask (still attended to, as environment tokens are, never scored).

    sampler_logp, mask, context: [B, T] (context None: no such tokens yet). Returns (mask, context, the
    sampler log-probs with 0 at dropped tokens, the number of tokens dropped as a 0-dim tensor)."""
    bad = mask.bool() & ~sampler_logp.isfinite()  # [B, T]
    dropped = bad.sum()
    if context is None and not bool(bad.any()):
        return mask, None, sampler_logp, dropped
    context = (torch.zeros_like(mask) if context is None else context) + bad.to(mask.dtype)
    clean = torch.where(sampler_logp.isfinite(), sampler_logp, torch.zeros_like(sampler_logp))
    return mask * ~bad, context, clean, dropped
