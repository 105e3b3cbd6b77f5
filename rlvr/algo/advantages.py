"""Advantages from rewards: tensors in, tensors out; `estimate_advantages` picks the estimator."""
from __future__ import annotations

import torch

from rlvr.algo.masks import last_token_mask

# one advantage per completion, from its group
OUTCOME_ESTIMATORS = ("group", "rloo", "group_passk", "opo", "gpg")
ESTIMATORS = OUTCOME_ESTIMATORS + ("reinforce_pp", "reinforce_pp_baseline", "gae")


def group_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (Shao et al. 2024, eq. 3): rewards [P, G] -> [P, G].

    group: (r - group mean) / (group std + eps); batch: (r - group mean) / (std of all rewards + eps);
    none: r - group mean (Dr. GRPO, Liu et al. 2025). Std is the unbiased sample std; a group of one gets 0.
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


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024): r_i minus the mean of the other G - 1 rewards. [P, G] -> [P, G]."""
    p, g = rewards.shape
    if g < 2:
        return torch.zeros_like(rewards)
    others = (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)  # [P, G]
    return rewards - others


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the unmasked entries (unbiased std); masked entries become 0. [B, T] -> [B, T]."""
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n.clamp(min=1)
    var = ((x - mean).pow(2) * m).sum() / (n - 1).clamp(min=1)
    return (x - mean) / (var.sqrt() + eps) * m


def token_returns(seq_rewards: torch.Tensor, token_rewards: torch.Tensor, mask: torch.Tensor,
                  gamma: float = 1.0) -> torch.Tensor:
    """Discounted return at each token: the sequence reward arrives at the last unmasked token.

    seq_rewards [B]; token_rewards [B, T] (e.g. -beta * KL, zero where masked); mask [B, T] -> [B, T].
    A masked position inside a sequence (an environment's span between model turns) is skipped: the
    return is carried across it unchanged, neither reset nor discounted, so a model turn before a tool
    result still sees the final reward (verl's compute_reinforce_plus_plus_outcome_advantage; `gae` here
    skips masked tokens the same way). Masked positions get 0.
    """
    r = token_rewards * mask  # [B, T]
    r = r + last_token_mask(mask).to(r.dtype) * seq_rewards[:, None]
    out = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    real = mask.bool()
    for t in reversed(range(r.shape[1])):
        running = torch.where(real[:, t], r[:, t] + gamma * running, running)
        out[:, t] = running
    return out * mask


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over each sequence's unmasked tokens.

    rewards, values, mask: [B, T]. Masked tokens are skipped: the next state of a token is the next
    unmasked token, and the value after the last one is 0. Returns (advantages, returns) [B, T],
    not whitened (see `whiten`).
    """
    b, t_len = rewards.shape
    m = mask.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    next_adv = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(t_len)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        adv[:, t] = a_t * m[:, t]
        # carry through masked positions unchanged
        next_value = torch.where(m[:, t] > 0, values[:, t], next_value)
        next_adv = torch.where(m[:, t] > 0, a_t, next_adv)
    returns = (adv + values) * m
    return adv, returns


def passk_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """Pass@k-aware GRPO (arXiv 2503.19595, as verl's grpo_passk cites it): only the best completion of each
    group learns, by how much it beats the runner-up, r_max - r_second (divided by the group std + eps
    with scale "group"; "none" leaves it). Ties go to torch.topk's pick. [P, G] -> [P, G]."""
    p, g = rewards.shape
    if g < 2:
        raise ValueError(f"pass@k advantages need at least 2 completions per prompt, got group size {g}")
    top, idx = torch.topk(rewards, 2, dim=1)  # [P, 2]
    gap = top[:, 0] - top[:, 1]  # [P]
    if scale == "group":
        gap = gap / (rewards.std(dim=1) + eps)
    elif scale != "none":
        raise ValueError(f"scale must be group or none for pass@k advantages, got {scale!r}")
    return torch.zeros_like(rewards).scatter(1, idx[:, :1], gap[:, None])


def opo_advantages(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """OPO (Hao et al. 2025, on-policy RL with the optimal baseline): r minus the group's length-weighted
    mean reward, sum(len * r) / sum(len). rewards, lengths [P, G] (completion tokens) -> [P, G]."""
    lengths = lengths.to(rewards.dtype)
    baseline = (lengths * rewards).sum(1, keepdim=True) / lengths.sum(1, keepdim=True).clamp(min=1)  # [P, 1]
    return rewards - baseline


def gpg_advantages(rewards: torch.Tensor, f_norm: float = 1.0) -> torch.Tensor:
    """GPG (Chu et al. 2025): (r - group mean) * alpha / f_norm with alpha = B / (completions whose reward
    is not 0), which scales up the gradient of batches where few completions score. [P, G] -> [P, G]."""
    alpha = rewards.numel() / torch.count_nonzero(rewards).clamp(min=1)
    return alpha * (rewards - rewards.mean(dim=1, keepdim=True)) / f_norm


def estimate_advantages(estimator: str, rewards: torch.Tensor, token_rewards: torch.Tensor, mask: torch.Tensor,
                        group_size: int, scale: str = "group", eps: float = 1e-6, gamma: float = 1.0,
                        lam: float = 1.0, values: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The advantages of one batch by `estimator` (algo.adv_estimator, one of ESTIMATORS).

    rewards [B] (B = P * group_size, groups consecutive); token_rewards [B, T] per-token rewards added to
    the sequence's (-beta * KL with the KL in the reward; zeros otherwise); mask [B, T] the trained
    tokens; values [B, T] the critic's (gae only). Returns (advantages [B] for the outcome estimators,
    [B, T] otherwise, whitened over the mask; returns [B, T], the critic's targets, for gae, else None).
    group: GRPO with `scale` and `eps` (group_advantages); rloo: leave-one-out baseline; group_passk: only
    each group's best learns (passk_advantages); opo: length-weighted baseline; gpg: GPG's scaled centring;
    reinforce_pp: discounted returns whitened over the batch (REINFORCE++); reinforce_pp_baseline: the
    group mean subtracted first, then whitened (verl's reinforce_plus_plus_baseline); gae: GAE with
    `gamma`, `lam`.
    """
    if estimator in OUTCOME_ESTIMATORS:
        total = (rewards + token_rewards.sum(-1)).view(-1, group_size)  # [P, G] token rewards folded in
        if estimator == "group":
            adv = group_advantages(total, scale, eps)
        elif estimator == "rloo":
            adv = rloo_advantages(total)
        elif estimator == "group_passk":
            adv = passk_advantages(total, scale, eps)
        elif estimator == "opo":
            adv = opo_advantages(total, mask.sum(-1).view(-1, group_size))
        else:
            adv = gpg_advantages(total)
        return adv.flatten(), None
    if estimator == "reinforce_pp_baseline":
        total = (rewards + token_rewards.sum(-1)).view(-1, group_size)  # [P, G]
        centred = (total - total.mean(dim=1, keepdim=True)).flatten()  # [B]
        return whiten(centred[:, None] * mask, mask), None  # [B, T]
    if estimator == "reinforce_pp":
        return whiten(token_returns(rewards, token_rewards, mask, gamma), mask), None  # [B, T]
    if estimator == "gae":
        if values is None:
            raise ValueError("gae needs critic values")
        step_rewards = token_rewards + last_token_mask(mask).to(rewards.dtype) * rewards[:, None]  # [B, T]
        adv, returns = gae(step_rewards, values, mask, gamma, lam)
        return whiten(adv, mask), returns
    raise ValueError(f"unknown adv_estimator {estimator!r}: one of {', '.join(ESTIMATORS)}")
