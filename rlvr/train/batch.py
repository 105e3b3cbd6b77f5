"""From scored rollouts to a training batch on the device, and what the loop computes on it before the
update: `make_batch` moves the rollout across (the step's one host-to-device crossing) and leaves out
tokens whose sampler log-prob is not finite; `old_policy_forward` is the policy's forward before its update
where the KL in the reward or a critic needs one; `with_advantages` computes the advantages (every
`algo.adv_estimator`, the KL optionally in the reward). The reference's forward is
rlvr.train.update.reference_forward (it runs per micro-batch of the update)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlvr.algo import drop_nonfinite, estimate_advantages, kl_estimate, present_tokens, split_beta
from rlvr.train.forward import completion_forward
from rlvr.train.state import Collected, Run


@dataclass(frozen=True, kw_only=True)
class KLSettings:
    """The KL term to the reference: its coefficient, where it goes (the loss, or the reward before the
    advantages), how it is estimated."""

    beta: float  # algo.beta (0: no KL term, no reference)
    kl_in: str  # algo.kl_in: "loss" or "reward"
    estimator: str  # algo.kl_estimator: k1, k2 or k3

    @property
    def loss_beta(self) -> float:
        return split_beta(self.beta, self.kl_in)[0]

    @property
    def reward_beta(self) -> float:
        return split_beta(self.beta, self.kl_in)[1]


@dataclass(frozen=True, kw_only=True)
class AdvantageSettings:
    """How a batch's advantages are estimated (rlvr.algo.estimate_advantages's arguments)."""

    estimator: str  # algo.adv_estimator
    scale: str  # algo.adv_scale
    eps: float  # algo.adv_eps
    gamma: float  # algo.gamma
    lam: float  # algo.lam


@dataclass(kw_only=True)
class Batch:
    """What one policy update trains on, on the device: whole groups of G completions per prompt."""

    prompts: list[list[int]]  # P prompt token lists
    completion_ids: torch.Tensor  # [B, Tc], B = P * G
    completion_mask: torch.Tensor  # [B, Tc] the tokens trained on
    group_size: int
    advantages: torch.Tensor | None = None  # [B] or [B, Tc] (with_advantages)
    rewards: torch.Tensor | None = None  # [B] each completion's total reward
    returns: torch.Tensor | None = None  # [B, Tc] value targets (PPO)
    old_values: torch.Tensor | None = None  # [B, Tc] critic values at rollout time (PPO)
    sampler_logp: torch.Tensor | None = None  # [B, Tc] the engine's log-probs, compared on the first pass
    env_mask: torch.Tensor | None = None  # [B, Tc] environment tokens of multi-turn episodes: context, not loss

    @property
    def present(self) -> torch.Tensor:
        """[B, Tc] every real token after the prompt (the model's and the environment's)."""
        return present_tokens(self.completion_mask, self.env_mask)


def compute_advantages(a: AdvantageSettings, kl: KLSettings, rewards: torch.Tensor, group_size: int,
                       mask: torch.Tensor, logp: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None,
                       values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """algo.adv_estimator's advantages (rlvr.algo.estimate_advantages) with its knobs (`a`);
    rewards [B] (one per completion); mask, logp, ref_logp, values [B, T].

    Returns (advantages [B] or [B, T], returns [B, T] for a critic or None, metrics). With
    kl_in == "reward", -beta * KL(policy || ref) per token joins the reward (RLOO, REINFORCE++, PPO).
    """
    metrics = {}
    token_r = torch.zeros_like(mask)  # [B, T]
    beta = kl.reward_beta
    if beta > 0 and ref_logp is not None:
        kl_tokens = kl_estimate(logp, ref_logp, kl.estimator) * mask  # [B, T]
        token_r = -beta * kl_tokens
        metrics["kl_reward"] = float(kl_tokens.sum() / mask.sum().clamp(min=1))
    adv, returns = estimate_advantages(a.estimator, rewards, token_r, mask, group_size, a.scale, a.eps, a.gamma, a.lam,
                                       values)
    return adv, returns, metrics


def make_batch(run: Run, c: Collected) -> tuple[Batch, dict]:
    """The collected batch on the device, its rewards, and the tokens it trains on: algo.mask_truncated
    leaves out truncated completions, and a token whose sampler log-prob is not finite stays context only."""
    s, r = run.settings.update, c.rollout.to(run.dist.device)  # the batch's one host-to-device crossing
    mask = r.completion_mask * (~r.truncated).float()[:, None] if s.mask_truncated else r.completion_mask
    sampler_logp, env_mask, metrics = r.sampler_logp, r.env_mask, {}
    if sampler_logp is not None:  # a -inf sampler log-prob would make an inf importance ratio: not trained on
        mask, env_mask, sampler_logp, dropped = drop_nonfinite(sampler_logp, mask, env_mask)
        metrics["rollout/nonfinite_logp_tokens"] = int(dropped)
    rewards = torch.tensor(c.scores.total, device=run.dist.device)  # [B]
    batch = Batch(prompts=r.prompt_ids, completion_ids=r.completion_ids, completion_mask=mask,
                  group_size=r.group_size, rewards=rewards, sampler_logp=sampler_logp, env_mask=env_mask)
    return batch, metrics


def old_policy_forward(run: Run, batch: Batch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The policy's log-probs [B, Tc] and its critic's values [B, Tc] before the update, where the KL in the
    reward (it compares them with the reference's) or a critic (PPO's values) needs them; (None, None)
    otherwise. fp32, without gradient: rlvr.train.forward.reference_precision."""
    s, m = run.settings.update, run.models
    if not ((s.kl.kl_in == "reward" and m.ref is not None) or m.critic is not None):
        return None, None
    # the KL in the reward compares the trainer's log-probs with the reference's: the sampler's
    # (rollout.weights bf16/int8, vLLM) differ by ~0.06 nats a token, a hidden length penalty
    with torch.no_grad():
        out = completion_forward(m.policy, batch.prompts, batch.completion_ids, batch.completion_mask,
                                 batch.group_size, s.pad_id, s.temperature, env_mask=batch.env_mask, packed=s.packed)
        values = m.critic(out.hidden).squeeze(-1) * batch.completion_mask if m.critic is not None else None
    return out.logp, values


def with_advantages(a: AdvantageSettings, kl: KLSettings, batch: Batch, logp: torch.Tensor | None = None,
                    ref_logp: torch.Tensor | None = None, values: torch.Tensor | None = None
                    ) -> tuple[Batch, dict]:
    """The batch with its advantages (and value targets for PPO), whitened over trained tokens; logp,
    values: old_policy_forward's; ref_logp: the reference's (the KL in the reward)."""
    adv, returns, metrics = compute_advantages(a, kl, batch.rewards, batch.group_size, batch.completion_mask, logp,
                                               ref_logp if kl.kl_in == "reward" else None, values)
    return replace(batch, advantages=adv, returns=returns, old_values=values), metrics
