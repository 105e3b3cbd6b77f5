"""The policy loss: one objective (algo.policy_loss) over the importance ratio, token weights on top,
aggregated to a scalar. Tensors in, tensors out."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from rlvr.algo.losses import aggregate, policy_ratio, ratio_metrics
from rlvr.algo.objectives import KNOB_DEFAULTS, REGISTRY, Inputs, NoKnobs, objective as objective_entry

# the names of algo.policy_loss (rlvr.algo.objectives.REGISTRY's, as it is at import: the config reads the registry)
OBJECTIVES = tuple(REGISTRY)
# every objective's knobs at their defaults (the papers'; the registry's knob dataclasses say where from)
OBJECTIVE_DEFAULTS = dict(KNOB_DEFAULTS)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float | None = None,
                ratio_level: str = "token", aggregation: str = "token-mean",
                norm_length: int | None = None, units: float | torch.Tensor | None = None, *,
                objective: str = "ppo", sampler_w: torch.Tensor | None = None, keep: torch.Tensor | None = None,
                params: NoKnobs | Mapping[str, float] | None = None, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`objective`'s per-token loss (ppo: the clipped surrogate max(-A r, -A clip(r, 1 - clip_low,
    1 + clip_high)), with dual_clip=c bounding negative-advantage losses by -A c; the others in
    rlvr.algo.objectives), times the sampler correction's weights `sampler_w` and the 0/1 token selection
    `keep`, aggregated to a scalar. log r is clamped to +-LOG_RATIO_LIMIT (no gradient beyond).

    logp, old_logp, mask, sampler_w, keep: [B, T]; advantages: [B] (broadcast over tokens) or [B, T].
    ratio_level="sequence" is GSPO's ratio (ppo, cispo, sapo). units: see `aggregate`. params: the
    objective's own knobs, its knob dataclass or a mapping by name over the defaults (OBJECTIVE_DEFAULTS;
    a name that is no objective's knob is a ValueError). Metrics (0-dim tensors): clip fractions (low, high,
    dual), the share of tokens the objective clipped, dropped or penalised, approximate KL to the old policy
    and ratio mean, each over this batch's real tokens (weight by their number to combine batches), and
    ratio min / max.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)  # [B, T]
    entry = objective_entry(objective)
    if ratio_level == "sequence" and not entry.sequence_ratio:
        raise ValueError(f"ratio_level sequence composes with "
                         f"{', '.join(n for n, e in REGISTRY.items() if e.sequence_ratio)}, "
                         f"not with policy_loss {objective!r}: set algo.ratio_level=token")
    ratio = policy_ratio(logp, old_logp, mask, ratio_level)  # [B, T]
    inputs = Inputs(logp=logp, old_logp=old_logp, ratio=ratio, advantages=advantages, mask=mask, clip_low=clip_low,
                    clip_high=clip_high, dual_clip=dual_clip, sampler_w=sampler_w, generator=generator)
    loss, dual, touched = entry.loss(inputs, entry.knobs_of(params))
    none = torch.zeros_like(mask, dtype=torch.bool)
    dual, touched = none if dual is None else dual, none if touched is None else touched
    if sampler_w is not None and not entry.folds_sampler_weights:
        loss = loss * sampler_w
    if keep is not None:
        loss = loss * keep
    metrics = ratio_metrics(logp, old_logp, ratio, advantages, mask, clip_low, clip_high, dual)
    m = mask.bool()
    metrics["objective/clipped_frac"] = (touched & m).sum() / m.sum().clamp(min=1)
    return aggregate(loss, mask, aggregation, norm_length, units), metrics
