"""Policy objectives beside the clipped surrogate, each a per-token loss [B, T] before aggregation (the
same `aggregate` reduces every one of them): tensors in, tensors out.

ratio is the importance ratio pi / pi_old as `losses.policy_ratio` builds it ([B, T]: per token, or GSPO's
sequence ratio spread over its tokens); advantages are [B, T]. Token weights (the sampler correction,
token selection) multiply the returned losses, except where a docstring says the objective folds them in.
"""
from __future__ import annotations

import torch

from rlvr.algo.losses import LOG_RATIO_LIMIT


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x [B, T] over mask [B, T] (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def cispo_loss(logp: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float,
               clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1, Chen et al. 2025): -sg[clip(r, 1 - clip_low, 1 + clip_high)] * A * log pi.

    Every token keeps its gradient (A * the clipped weight * d log pi); only the weight is clipped. clip_low
    >= 1 leaves the weight without a lower bound (the paper's choice; TRL's `epsilon_high` is 1 + clip_high).
    Returns (loss [B, T], clipped [B, T] bool: where the weight was clipped)."""
    weight = ratio.detach().clamp(1 - clip_low, 1 + clip_high)  # [B, T]
    return -weight * advantages * logp, weight != ratio.detach()


def sapo_loss(ratio: torch.Tensor, advantages: torch.Tensor, tau_pos: float = 1.0,
              tau_neg: float = 1.05) -> torch.Tensor:
    """SAPO (Gao et al. 2025): a soft gate instead of the hard clip, -f(r) * A with f(r) =
    sigmoid(tau (r - 1)) * 4 / tau; tau_pos where A > 0, tau_neg elsewhere. f(1) = 2 / tau and f'(1) = 1,
    so near the old policy it is the plain policy gradient; far from it the gradient fades smoothly. [B, T]."""
    tau = torch.where(advantages > 0, torch.as_tensor(tau_pos, dtype=ratio.dtype),
                      torch.as_tensor(tau_neg, dtype=ratio.dtype))  # [B, T]
    return -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * advantages


def gmpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              clip_low: float = 0.4, clip_high: float = 0.4, weights: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """GMPO (Zhao et al. 2025): the geometric mean of the token ratios, clipped per token in log space:
    -A_i * exp(mean_t sgn(A) min(sgn(A) log r_t, sgn(A) clip(log r_t, -clip_low, clip_high))).

    One loss per sequence, spread over its tokens ([B, T], the same value at each), so that the
    seq-mean-token-mean aggregation is the paper's mean over sequences. A [B, T] advantage is averaged
    over the sequence. weights [B, T] (the sampler correction) enter as their geometric mean per sequence,
    as verl's geo_mean does. Returns (loss [B, T], clipped [B, T] bool)."""
    m = mask.to(logp.dtype)
    n = m.sum(-1) + 1e-8  # [B] the epsilon verl adds, so fully masked rows give 0, not nan
    log_r = logp - old_logp  # [B, T]
    sign = torch.sign(advantages)
    log_r_clip = log_r.clamp(-clip_low, clip_high)
    kept = sign * torch.minimum(sign * log_r, sign * log_r_clip)  # [B, T]
    seq_ratio = torch.exp((kept * m).sum(-1) / n)  # [B]
    seq_adv = (advantages * m).sum(-1) / n  # [B]
    loss = -seq_adv * seq_ratio  # [B]
    if weights is not None:
        loss = loss * torch.exp((torch.log(weights + 1e-10) * m).sum(-1) / n)
    return loss[:, None].expand_as(logp), log_r != log_r_clip


def gpg_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """GPG (Chu et al. 2025): the plain policy gradient, -A * log pi, no ratio and no clip. [B, T]."""
    return -advantages * logp


def clip_cov_loss(surrogate: torch.Tensor, clipped: torch.Tensor, logp: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, cov_ratio: float = 2e-4, cov_lb: float = 1.0, cov_ub: float = 5.0,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov (Cui et al. 2025, "The entropy mechanism of RL for reasoning LMs"): the clipped
    surrogate with the gradient of a few high-covariance tokens removed. Among the real tokens the clip
    left alone whose centred (A - mean A) (log pi - mean log pi) lies in (cov_lb, cov_ub), a random
    max(1, int(cov_ratio * real tokens)) get loss 0. That count is a number of tokens, so it is read on
    the host here.

    surrogate [B, T]: the clipped surrogate's per-token loss; clipped [B, T] bool: where the clip acted.
    Returns (loss [B, T], dropped [B, T] bool)."""
    real = mask.bool()
    cov = (advantages - masked_mean(advantages, mask)) * (logp.detach() - masked_mean(logp.detach(), mask))
    eligible = (cov < cov_ub) & (cov > cov_lb) & real & ~clipped  # [B, T]
    n_pick = max(int(cov_ratio * int(real.sum())), 1)
    where = torch.nonzero(eligible)  # [K, 2]
    where = where[torch.randperm(len(where), generator=generator)[:n_pick]] if len(where) else where
    dropped = torch.zeros_like(real)
    dropped[where[:, 0], where[:, 1]] = True
    return surrogate * ~dropped, dropped


def kl_cov_loss(ratio: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, cov_ratio: float = 2e-4, kl_coef: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-Cov (Cui et al. 2025): the unclipped surrogate -A r, plus kl_coef * |log pi - log pi_old| on the
    max(1, int(cov_ratio * real tokens)) real tokens of largest centred covariance (A - mean A)(log pi -
    mean log pi): a KL penalty exactly where entropy collapses fastest. Returns (loss [B, T], penalised
    [B, T] bool)."""
    real = mask.bool()
    flat = real.flatten().nonzero().squeeze(-1)  # [N] real token positions
    a, lp = advantages.detach().flatten()[flat], logp.detach().flatten()[flat]
    cov = (a - a.mean()) * (lp - lp.mean())  # [N]
    penalised = torch.zeros(real.numel(), dtype=torch.bool, device=real.device)
    if len(flat):
        top = torch.topk(cov, max(1, int(len(cov) * cov_ratio))).indices
        penalised[flat[top]] = True
    penalised = penalised.view_as(real)
    loss = -advantages * ratio + penalised * kl_coef * (logp - old_logp).abs()
    return loss, penalised


def vespo_weights(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  sampler_weights: torch.Tensor | None = None, k_pos: float = 2.0, lambda_pos: float = 3.0,
                  k_neg: float = 3.0, lambda_neg: float = 2.0) -> torch.Tensor:
    """VESPO's gamma weight of each sequence, no gradient: phi(w) = e^lam w^k e^(-lam w) (phi(1) = 1), w the
    sequence's whole importance ratio prod_t pi / pi_old, times the sampler correction's token weights
    when given (TRL's get_gamma_weights). k, lam are the positive-advantage pair where A >= 0.
    advantages [B, 1] or [B, T]; returns phi [B, 1] (or [B, T] with per-token advantages)."""
    floor = -18.420680743952367  # log(1e-8): TRL's floor for log w, so a masked token gives w ~ 1e-8
    with torch.no_grad():
        m = mask.to(logp.dtype)
        log_w = ((logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT) * m).sum(-1, keepdim=True)  # [B, 1]
        if sampler_weights is not None:
            log_w = log_w + (torch.log(sampler_weights).clamp(floor, LOG_RATIO_LIMIT) * m).sum(-1, keepdim=True)
        log_w = log_w.clamp(floor, LOG_RATIO_LIMIT)
        pos = advantages >= 0
        k = torch.where(pos, k_pos, k_neg).to(logp.dtype)
        lam = torch.where(pos, lambda_pos, lambda_neg).to(logp.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_loss(logp: torch.Tensor, advantages: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """VESPO (TRL's `vespo`): -phi * A * log pi, phi the detached gamma weight of `vespo_weights`. [B, T]."""
    return -phi * advantages * logp
