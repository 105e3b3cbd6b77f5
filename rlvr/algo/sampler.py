"""Token weights and masks applied on top of a policy objective: the correction for a sampler that is
not the trainer (truncated or masked importance sampling, per token or per sequence), DeepSeek-V3.2's
off-policy sequence mask, the high-entropy token selection ("80/20") and the adaptive entropy coefficient
(Skywork-OR1). Tensors in, tensors out; none carries a gradient."""
from __future__ import annotations

import math

import torch

from rlvr.algo.losses import LOG_RATIO_LIMIT, aggregate, loss_units

SAMPLER_MODES = ("off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def sampler_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, mode: str,
                    c_min: float = 0.0, c_max: float | None = 2.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Importance weights pi_trainer / pi_sampler against the engine that sampled (TRL's
    vllm_importance_sampling_mode, verl's rollout_is with its TIS threshold or IcePop band).

    The ratio is per token, or per sequence (exp of the sum of its tokens' log-ratios, the same weight at
    each token); *_truncate clamps it into [c_min, c_max], *_mask sets it to 0 outside that band (IcePop
    with c_min > 0; c_max None: no upper bound). trainer_logp, sampler_logp, mask: [B, T]; trainer_logp is
    the behaviour policy as the trainer computes it (old_logp). Weights are 0 off the mask and where a
    log-prob is not finite; the log-ratio is clamped to +-LOG_RATIO_LIMIT (log c_max for truncation)
    before exp, so no gap overflows. Returns (weights [B, T], metrics: sampler/masked_token_frac and
    sampler/masked_seq_frac (tokens, and sequences with one, whose weight the band zeroed),
    sampler/truncated_token_frac, sampler/weight_mean over real tokens: 0-dim tensors)."""
    if mode not in SAMPLER_MODES[1:]:
        raise ValueError(f"sampler correction must be one of {', '.join(SAMPLER_MODES)}, got {mode!r}")
    if c_min < 0 or (c_max is not None and c_max <= max(c_min, 0.0)):
        raise ValueError(f"sampler correction needs 0 <= c_min < c_max, got c_min={c_min}, c_max={c_max}")
    real = mask.bool()
    log_w = trainer_logp.detach().float() - sampler_logp.detach().float()  # [B, T]
    usable = real & log_w.isfinite()
    log_w = torch.where(usable, log_w, torch.zeros_like(log_w))
    if mode.startswith("sequence"):
        log_w = log_w.sum(-1, keepdim=True).expand_as(log_w)  # [B, T] the sequence's log-ratio at each token
    upper = math.log(c_max) if c_max is not None else LOG_RATIO_LIMIT
    lower = math.log(c_min) if c_min > 0 else -LOG_RATIO_LIMIT
    if mode.endswith("truncate"):
        w = torch.exp(log_w.clamp(lower, upper))
        cut, out = (log_w > upper) | (log_w < lower), torch.zeros_like(real)
    else:
        w = torch.exp(log_w.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
        out = (w < c_min) | (w > (c_max if c_max is not None else math.inf))
        w, cut = torch.where(out, torch.zeros_like(w), w), torch.zeros_like(real)
    w = torch.where(usable, w, torch.zeros_like(w))
    n_tok, n_seq = real.sum().clamp(min=1), real.any(-1).sum().clamp(min=1)
    metrics = {"sampler/masked_token_frac": (out & real).sum() / n_tok,
               "sampler/masked_seq_frac": ((out & real).any(-1)).sum() / n_seq,
               "sampler/truncated_token_frac": (cut & real).sum() / n_tok,
               "sampler/weight_mean": (w * real).sum() / n_tok}
    return w, metrics


def tis_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                cap: float) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): min(pi_trainer / pi_sampler, cap) per token, the token_truncate mode of
    `sampler_weights` with no lower bound. All inputs [B, T] -> [B, T]."""
    if cap <= 0:
        raise ValueError(f"tis cap must be > 0, got {cap}")
    return sampler_weights(trainer_logp, sampler_logp, mask, "token_truncate", 0.0, cap)[0]


def off_policy_mask(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask (TRL's get_off_policy_mask): a sequence leaves the loss
    when its advantage is negative and its mean KL estimate log pi_behaviour - log pi over real tokens
    exceeds `threshold`: such samples are the ones most likely to push the policy somewhere it did not
    sample. behaviour_logp is the sampler's log-probs (or the old policy's without them).

    logp, behaviour_logp, mask: [B, T]; advantages [B] or [B, T]. Returns 1 keep / 0 drop, [B, 1] (or
    [B, T] for per-token advantages)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    kl = torch.nan_to_num(behaviour_logp - logp.detach(), nan=0.0)  # [B, T]
    m = mask.to(logp.dtype)
    mean_kl = (kl * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)  # [B, 1]
    return ((advantages >= 0) | (mean_kl <= threshold)).to(logp.dtype)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """The top `quantile` share of real tokens by entropy ("Beyond the 80/20 rule", Wang et al. 2025:
    quantile 0.2 trains on the forking tokens only; TRL's top_entropy_quantile): True where the entropy
    is at least the (1 - quantile) quantile of the real tokens' entropies. entropy, mask [B, T] -> bool
    [B, T], False off the mask."""
    real = mask.bool()
    values = entropy.detach()[real].float()
    if values.numel() == 0:
        return torch.zeros_like(real)
    threshold = torch.quantile(values, 1.0 - quantile)
    return ((entropy.detach() * real) >= threshold) & real


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, selected: torch.Tensor | None, aggregation: str,
                  norm_length: int | None = None, units: float | torch.Tensor | None = None) -> torch.Tensor:
    """The entropy bonus H (the loss is L_policy - coef * H): the entropy aggregated as the policy loss is, over
    the tokens the policy gradient acts on, as TRL's effective mask: the real tokens `mask` [B, T], and of
    them only the high-entropy selection `selected` [B, T] (None: all). With a selection it is a mean over
    the selected tokens (divided by them, not by every real token), so top_entropy_quantile does not shrink
    the bonus by its own share. entropy [B, T] (with its gradient) -> scalar.

    units: the whole batch's `loss_units` over `mask` when this batch is a part of it (see `aggregate`);
    with a selection they are scaled by this part's selected share (its selected units / its real units),
    which makes one batch divide by exactly its selected units, and micro-batches (each selecting its own
    quantile) by their selected units in proportion."""
    if selected is None:
        return aggregate(entropy, mask, aggregation, norm_length, units)
    chosen = mask * selected.to(mask.dtype)  # [B, T]
    own = loss_units(mask, aggregation)
    share = loss_units(chosen, aggregation) / own.clamp(min=1)
    whole = (own if units is None else torch.as_tensor(units, dtype=own.dtype, device=own.device)) * share
    total = aggregate(entropy, chosen, aggregation, norm_length, units=1.0)  # the sum over the selected units
    return torch.where(whole > 0, total / whole.clamp(min=1e-12), torch.zeros_like(total))


def adaptive_entropy_coef(coef: float, entropy: float, target: float, delta: float, low: float = 0.0,
                          high: float = 1.0) -> float:
    """Skywork-OR1's adaptive entropy control, one step: the coefficient rises by `delta` while the
    entropy is at or below `target` and falls by `delta` above it, kept in [low, high]. The bonus is
    applied only while the entropy is at or below the target (see `entropy_bonus_coef`)."""
    return min(coef + delta, high) if entropy <= target else max(coef - delta, low)


def entropy_bonus_coef(coef: float, last_entropy: float, target: float) -> float:
    """The coefficient applied in this step under adaptive control: `coef` while the last step's entropy
    was at or below `target`, else 0 (no entropy measured yet: inf, so 0)."""
    return coef if last_entropy <= target else 0.0
