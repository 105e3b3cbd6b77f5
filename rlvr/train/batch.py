"""Phase 4 of a step: from scored rollouts to a training batch on the device. `make_batch` moves the
rollout across (its one host-to-device crossing), leaves out tokens whose sampler log-prob is not finite,
and computes the advantages (`compute_advantages`: every `algo.adv_estimator`, the KL optionally in the
reward, from the trainer's own log-probs)."""
from __future__ import annotations

import torch

from rlvr.algo import (drop_nonfinite, gae, gpg_advantages, group_advantages, kl_estimate, opo_advantages,
                       passk_advantages, rloo_advantages, split_beta, token_returns, whiten)
from rlvr.config import AlgoConfig
from rlvr.train.logprobs import completion_logprobs, reference_logprobs
from rlvr.train.state import Collected, Run
from rlvr.train.update import Batch


OUTCOME_ESTIMATORS = ("group", "rloo", "group_passk", "opo", "gpg")  # one advantage per completion, from its group


def _outcome_advantages(a: AlgoConfig, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """rewards, lengths (real completion tokens) [P, G] -> advantages [P, G] by algo.adv_estimator."""
    if a.adv_estimator == "group":
        return group_advantages(rewards, a.adv_scale, a.adv_eps)
    if a.adv_estimator == "rloo":
        return rloo_advantages(rewards)
    if a.adv_estimator == "group_passk":
        return passk_advantages(rewards, a.adv_scale, a.adv_eps)
    if a.adv_estimator == "opo":
        return opo_advantages(rewards, lengths)
    return gpg_advantages(rewards)


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
    if a.adv_estimator in OUTCOME_ESTIMATORS:
        total = rewards + token_r.sum(-1)  # [B] sequence reward with the KL folded in
        adv = _outcome_advantages(a, total.view(-1, group_size), mask.sum(-1).view(-1, group_size))
        return adv.flatten(), None, metrics
    if a.adv_estimator == "reinforce_pp_baseline":  # verl's reinforce_plus_plus_baseline
        total = rewards + token_r.sum(-1)
        centred = total.view(-1, group_size) - total.view(-1, group_size).mean(dim=1, keepdim=True)  # [P, G]
        return whiten(centred.flatten()[:, None] * mask, mask), None, metrics
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


def make_batch(run: Run, c: Collected) -> tuple[Batch, dict]:
    """Phase 4a: advantages (and value targets for PPO) for the collected batch."""
    a, r = run.cfg.algo, c.rollout.to(run.dist.device)  # the batch's one host-to-device crossing
    mask = r.completion_mask * (~r.truncated).float()[:, None] if a.mask_truncated else r.completion_mask
    sampler_logp, env_mask, dropped = r.sampler_logp, r.env_mask, None
    if sampler_logp is not None:  # a -inf sampler log-prob would make an inf importance ratio: not trained on
        mask, env_mask, sampler_logp, dropped = drop_nonfinite(sampler_logp, mask, env_mask)
    logp = ref_logp = values = None
    with torch.no_grad():
        if a.kl_in == "reward" and run.ref is not None:
            ref_logp = reference_logprobs(run.ref, r.prompt_ids, r.completion_ids, r.completion_mask,
                                          r.group_size, run.pad_id, run.cfg.rollout.temperature, r.env_mask)
        if ref_logp is not None or run.critic is not None:
            # the KL in the reward compares the trainer's log-probs with the reference's: the sampler's
            # (rollout.weights bf16/int8, vLLM) differ by ~0.06 nats a token, a hidden length penalty
            out = completion_logprobs(run.policy, r.prompt_ids, r.completion_ids, r.completion_mask,
                                      r.group_size, run.pad_id, run.cfg.rollout.temperature, with_hidden=True,
                                      env_mask=r.env_mask)
            logp = out.logp  # [B, T]
            if run.critic is not None:
                values = run.critic(out.hidden).squeeze(-1) * r.completion_mask  # [B, T]
    rewards = torch.tensor(c.scores.total, device=run.dist.device)  # [B]
    adv, returns, metrics = compute_advantages(a, rewards, r.group_size, mask, logp, ref_logp,
                                               values)  # whitened over trained tokens
    if dropped is not None:
        metrics["rollout/nonfinite_logp_tokens"] = int(dropped)
    batch = Batch(r.prompt_ids, r.completion_ids, mask, adv, r.group_size, returns, values,
                  sampler_logp=sampler_logp, env_mask=env_mask)
    return batch, metrics
