"""From scored rollouts to advantages, for every `algo.adv_estimator`, with the KL optionally in the reward."""
from __future__ import annotations

import torch

from rlvr.algo import gae, group_advantages, kl_estimate, rloo_advantages, split_beta, token_returns, whiten
from rlvr.config import AlgoConfig


def compute_advantages(a: AlgoConfig, rewards: torch.Tensor, group_size: int, mask: torch.Tensor,
                       logp: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None,
                       values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """rewards [B] (one per completion); mask, logp, ref_logp, values [B, T].

    Returns (advantages [B] or [B, T], returns [B, T] for a critic or None, metrics). With
    kl_in == "reward", -beta * KL(policy || ref) per token joins the reward (RLOO, REINFORCE++, PPO).
    """
    metrics = {}
    token_r = torch.zeros_like(mask)
    beta = split_beta(a.beta, a.kl_in)[1]
    if beta > 0 and ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, a.kl_estimator) * mask  # [B, T]
        token_r = -beta * kl
        metrics["kl_reward"] = float(kl.sum() / mask.sum().clamp(min=1))
    if a.adv_estimator in ("group", "rloo"):
        total = rewards + token_r.sum(-1)  # [B] sequence reward with the KL folded in
        grouped = total.view(-1, group_size)  # [P, G]
        adv = group_advantages(grouped, a.adv_scale, a.adv_eps) if a.adv_estimator == "group" \
            else rloo_advantages(grouped)
        return adv.flatten(), None, metrics
    if a.adv_estimator == "reinforce_pp":
        returns = token_returns(rewards, token_r, mask, a.gamma)  # [B, T]
        return whiten(returns, mask), None, metrics
    if a.adv_estimator == "gae":
        if values is None:
            raise ValueError("gae needs critic values")
        last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()
        token_rewards = token_r + last.to(rewards.dtype) * rewards[:, None]  # [B, T]
        adv, returns = gae(token_rewards, values, mask, a.gamma, a.lam)
        return whiten(adv, mask), returns, metrics
    raise ValueError(f"unknown adv_estimator {a.adv_estimator!r}")
