"""The policy loss: one objective (algo.policy_loss) over the importance ratio, token weights on top,
aggregated to a scalar. Tensors in, tensors out."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from rlvr.algo.losses import aggregate, clipped_surrogate, policy_ratio, ratio_metrics
from rlvr.algo.objectives import (cispo_loss, clip_cov_loss, gmpo_loss, gpg_loss, kl_cov_loss, sapo_loss, vespo_loss,
                                  vespo_weights)

OBJECTIVES = ("ppo", "cispo", "sapo", "gmpo", "gpg", "clip_cov", "kl_cov", "vespo")
# the objectives whose papers (or TRL's importance_sampling_level) put GSPO's sequence ratio in place of
# the token ratio; the others define their own sequence quantity (gmpo, vespo) or none (gpg, *_cov)
SEQUENCE_RATIO_OBJECTIVES = ("ppo", "cispo", "sapo")
# each objective's own knobs and their defaults (the papers', as verl and TRL ship them)
OBJECTIVE_DEFAULTS = {"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05, "cov_ratio": 2e-4, "clip_cov_lb": 1.0,
                      "clip_cov_ub": 5.0, "kl_cov_coef": 1.0, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
                      "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}


def _objective(objective: str, logp, old_logp, ratio, adv, mask, clip_low, clip_high, dual_clip, sampler_w,
               p: Mapping[str, float], generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """(per-token loss [B, T], dual-clip mask, tokens the objective clipped / dropped / penalised, whether the
    sampler weights are already inside the loss)."""
    none = torch.zeros_like(mask, dtype=torch.bool)
    if objective == "ppo":
        loss, dual = clipped_surrogate(ratio, adv, clip_low, clip_high, dual_clip)
        return loss, dual, none, False
    if objective == "cispo":
        loss, clipped = cispo_loss(logp, ratio, adv, clip_low, clip_high)
        return loss, none, clipped, False
    if objective == "sapo":
        return sapo_loss(ratio, adv, p["sapo_tau_pos"], p["sapo_tau_neg"]), none, none, False
    if objective == "gmpo":
        loss, clipped = gmpo_loss(logp, old_logp, adv, mask, clip_low, clip_high, sampler_w)
        return loss, none, clipped, True
    if objective == "gpg":
        return gpg_loss(logp, adv), none, none, False
    if objective == "clip_cov":
        surrogate, _ = clipped_surrogate(ratio, adv, clip_low, clip_high)
        clipped = (-adv * ratio.clamp(1 - clip_low, 1 + clip_high) > -adv * ratio) & mask.bool()
        loss, dropped = clip_cov_loss(surrogate, clipped, logp, adv, mask, p["cov_ratio"], p["clip_cov_lb"],
                                      p["clip_cov_ub"], generator)
        return loss, none, dropped, False
    if objective == "kl_cov":
        loss, penalised = kl_cov_loss(ratio, logp, old_logp, adv, mask, p["cov_ratio"], p["kl_cov_coef"])
        return loss, none, penalised, False
    if objective == "vespo":
        phi = vespo_weights(logp, old_logp, adv, mask, sampler_w, p["vespo_k_pos"], p["vespo_lambda_pos"],
                            p["vespo_k_neg"], p["vespo_lambda_neg"])
        return vespo_loss(logp, adv, phi), none, none, True
    raise ValueError(f"algo.policy_loss must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float | None = None,
                ratio_level: str = "token", aggregation: str = "token-mean",
                norm_length: int | None = None, units: float | torch.Tensor | None = None, *,
                objective: str = "ppo", sampler_w: torch.Tensor | None = None, keep: torch.Tensor | None = None,
                params: Mapping[str, float] | None = None, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`objective`'s per-token loss (ppo: the clipped surrogate max(-A r, -A clip(r, 1 - clip_low,
    1 + clip_high)), with dual_clip=c bounding negative-advantage losses by -A c; the others in
    rlvr.algo.objectives), times the sampler correction's weights `sampler_w` and the 0/1 token selection
    `keep`, aggregated to a scalar. log r is clamped to +-LOG_RATIO_LIMIT (no gradient beyond).

    logp, old_logp, mask, sampler_w, keep: [B, T]; advantages: [B] (broadcast over tokens) or [B, T].
    ratio_level="sequence" is GSPO's ratio (ppo, cispo, sapo). units: see `aggregate`. params: the
    objective's own knobs (OBJECTIVE_DEFAULTS). Metrics (0-dim tensors): clip fractions (low, high,
    dual), the share of tokens the objective clipped, dropped or penalised, approximate KL to the old policy
    and ratio mean, each over this batch's real tokens (weight by their number to combine batches), and
    ratio min / max.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)  # [B, T]
    if ratio_level == "sequence" and objective not in SEQUENCE_RATIO_OBJECTIVES:
        raise ValueError(f"ratio_level sequence composes with {', '.join(SEQUENCE_RATIO_OBJECTIVES)}, "
                         f"not with policy_loss {objective!r}: set algo.ratio_level=token")
    ratio = policy_ratio(logp, old_logp, mask, ratio_level)  # [B, T]
    p = {**OBJECTIVE_DEFAULTS, **(params or {})}
    loss, dual, touched, folded = _objective(objective, logp, old_logp, ratio, advantages, mask, clip_low,
                                             clip_high, dual_clip, sampler_w, p, generator)
    if sampler_w is not None and not folded:
        loss = loss * sampler_w
    if keep is not None:
        loss = loss * keep
    metrics = ratio_metrics(logp, old_logp, ratio, advantages, mask, clip_low, clip_high, dual)
    m = mask.bool()
    metrics["objective/clipped_frac"] = (touched & m).sum() / m.sum().clamp(min=1)
    return aggregate(loss, mask, aggregation, norm_length, units), metrics
