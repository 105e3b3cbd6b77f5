"""Advantages from rewards: tensors in, tensors out."""
from __future__ import annotations

import torch


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
    """
    r = token_rewards * mask  # [B, T]
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()  # [B, T] the final token
    r = r + last.to(r.dtype) * seq_rewards[:, None]
    out = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.shape[1])):
        running = r[:, t] + gamma * running * mask[:, t]
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
