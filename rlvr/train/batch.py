"""Phase 4 of a step: from scored rollouts to a training batch on the device. `make_batch` moves the
rollout across (its one host-to-device crossing), leaves out tokens whose sampler log-prob is not finite,
and computes the advantages (`compute_advantages`: every `algo.adv_estimator`, the KL optionally in the
reward, from the trainer's own log-probs)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo import drop_nonfinite, estimate_advantages, kl_estimate, present_tokens, split_beta
from rlvr.config import AlgoConfig
from rlvr.train.logprobs import completion_logprobs, reference_logprobs
from rlvr.train.state import Collected, Run


@dataclass(kw_only=True)
class Batch:
    """What one policy update trains on, on the device: whole groups of G completions per prompt."""

    prompts: list[list[int]]  # P prompt token lists
    completion_ids: torch.Tensor  # [B, Tc], B = P * G
    completion_mask: torch.Tensor  # [B, Tc]
    advantages: torch.Tensor  # [B] or [B, Tc]
    group_size: int
    returns: torch.Tensor | None = None  # [B, Tc] value targets (PPO)
    old_values: torch.Tensor | None = None  # [B, Tc] critic values at rollout time (PPO)
    sampler_logp: torch.Tensor | None = None  # [B, Tc] the engine's log-probs, compared on the first pass
    env_mask: torch.Tensor | None = None  # [B, Tc] environment tokens of multi-turn episodes: context, not loss

    @property
    def present(self) -> torch.Tensor:
        """[B, Tc] every real token after the prompt (the model's and the environment's)."""
        return present_tokens(self.completion_mask, self.env_mask)


def compute_advantages(a: AlgoConfig, rewards: torch.Tensor, group_size: int, mask: torch.Tensor,
                       logp: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None,
                       values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """algo.adv_estimator's advantages (rlvr.algo.estimate_advantages) with the algo section's knobs;
    rewards [B] (one per completion); mask, logp, ref_logp, values [B, T].

    Returns (advantages [B] or [B, T], returns [B, T] for a critic or None, metrics). With
    kl_in == "reward", -beta * KL(policy || ref) per token joins the reward (RLOO, REINFORCE++, PPO).
    """
    metrics = {}
    token_r = torch.zeros_like(mask)  # [B, T]
    beta = split_beta(a.beta, a.kl_in)[1]
    if beta > 0 and ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, a.kl_estimator) * mask  # [B, T]
        token_r = -beta * kl
        metrics["kl_reward"] = float(kl.sum() / mask.sum().clamp(min=1))
    adv, returns = estimate_advantages(a.adv_estimator, rewards, token_r, mask, group_size, a.adv_scale, a.adv_eps,
                                       a.gamma, a.lam, values)
    return adv, returns, metrics


def make_batch(run: Run, c: Collected) -> tuple[Batch, dict]:
    """Phase 4a: advantages (and value targets for PPO) for the collected batch."""
    s, m = run.settings.update, run.models
    a, r = s.algo, c.rollout.to(run.dist.device)  # the batch's one host-to-device crossing
    mask = r.completion_mask * (~r.truncated).float()[:, None] if a.mask_truncated else r.completion_mask
    sampler_logp, env_mask, dropped = r.sampler_logp, r.env_mask, None
    if sampler_logp is not None:  # a -inf sampler log-prob would make an inf importance ratio: not trained on
        mask, env_mask, sampler_logp, dropped = drop_nonfinite(sampler_logp, mask, env_mask)
    logp = ref_logp = values = None
    with torch.no_grad():
        if a.kl_in == "reward" and m.ref is not None:
            ref_logp = reference_logprobs(m.ref, r.prompt_ids, r.completion_ids, r.completion_mask,
                                          r.group_size, s.pad_id, s.temperature, r.env_mask)
        if ref_logp is not None or m.critic is not None:
            # the KL in the reward compares the trainer's log-probs with the reference's: the sampler's
            # (rollout.weights bf16/int8, vLLM) differ by ~0.06 nats a token, a hidden length penalty
            out = completion_logprobs(m.policy, r.prompt_ids, r.completion_ids, r.completion_mask,
                                      r.group_size, s.pad_id, s.temperature, with_hidden=True,
                                      env_mask=r.env_mask)
            logp = out.logp  # [B, T]
            if m.critic is not None:
                values = m.critic(out.hidden).squeeze(-1) * r.completion_mask  # [B, T]
    rewards = torch.tensor(c.scores.total, device=run.dist.device)  # [B]
    adv, returns, metrics = compute_advantages(a, rewards, r.group_size, mask, logp, ref_logp,
                                               values)  # whitened over trained tokens
    if dropped is not None:
        metrics["rollout/nonfinite_logp_tokens"] = int(dropped)
    batch = Batch(prompts=r.prompt_ids, completion_ids=r.completion_ids, completion_mask=mask, advantages=adv,
                  group_size=r.group_size, returns=returns, old_values=values,
                  sampler_logp=sampler_logp, env_mask=env_mask)
    return batch, metrics
