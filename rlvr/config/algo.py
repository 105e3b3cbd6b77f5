"""The `algo` section: the objective, its advantages and its sampler correction, in one dataclass whose
attribute docstrings are the documentation. Each objective's own knobs (sapo_tau_pos, cov_ratio, ...) are
keys of this section too, defined once beside the objective in rlvr/algo/objectives.py (its REGISTRY) and
inherited here, after algo.policy_loss."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rlvr.algo.objectives import REGISTRY, AllKnobs


def _presets() -> str:
    from rlvr.algo.presets import presets

    return ", ".join(presets())


# the lists of --help that the objectives' registry holds (rlvr/config/build.py's field_docs fills them when
# the help is read), so that an objective added there is in the help without a word here
HELP_LISTS = {
    "objectives": lambda: ", ".join(f"{name} ({entry.help})" for name, entry in REGISTRY.items()),
    "sequence_ratio_objectives": lambda: ", ".join(name for name, e in REGISTRY.items() if e.sequence_ratio),
    "presets": _presets,
}


@dataclass(kw_only=True)
class _Head:
    """The algo section's keys before the objectives' knobs (a base class, so that --help and config.yaml keep
    their order: preset ... policy_loss, the knobs, then the rest)."""

    HELP_LISTS = HELP_LISTS
    preset: str = "grpo"
    """Named set of the knobs below ({presets}, in rlvr/algo/presets.py); explicit keys override it. A config
    file's algo keys belong to the file's preset: a different preset given on the command line replaces
    the file's values for the keys it sets (a note names them); keys also given on the command line
    still win."""
    adv_estimator: str = "group"
    """Advantages: group (GRPO), rloo (leave-one-out), reinforce_pp (batch-whitened returns), gae (PPO critic),
    group_passk (only each group's best completion learns, by its margin over the runner-up: verl's
    grpo_passk), opo (length-weighted group baseline), reinforce_pp_baseline (group mean removed, then
    whitened over the batch's tokens), gpg (group-centred, scaled by B / completions with a non-zero reward)."""
    adv_scale: str = "group"
    """group and group_passk estimators: divide by the group std (group), the batch std (batch, group only),
    or not at all (none)."""
    adv_eps: float = 1e-6
    """Added to the std when normalising advantages."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (ratio <= 1 + clip_high)."""
    dual_clip: Optional[float] = None
    """Dual-clip bound c for negative advantages (loss <= -A c); null disables."""
    policy_loss: str = "ppo"
    """Policy objective (docs/algorithms.md; rlvr/algo/objectives.py's REGISTRY): {objectives}."""


@dataclass(kw_only=True)
class AlgoConfig(AllKnobs, _Head):
    """The algo section: _Head's keys, every objective's knobs (AllKnobs), then these."""

    HELP_LISTS = HELP_LISTS
    ratio_level: str = "token"
    """Importance ratio per token, or per sequence (sequence: GSPO; composes with policy_loss
    {sequence_ratio_objectives})."""
    aggregation: str = "seq-mean-token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm or seq-mean-token-sum
    (LUSPO)."""
    sampler_correction: str = "auto"
    """Importance weights pi_trainer / pi_sampler against the engine that sampled: token_truncate,
    token_mask, sequence_truncate, sequence_mask (truncate clamps the ratio into [sampler_c_min,
    sampler_c_max], mask zeroes it outside: IcePop with sampler_c_min > 0), off, or auto: rollout.tis_cap
    as before (token_truncate at C_max = the cap; by default 2.0 where the sampler is not the trainer's
    own forward: rollout.engine vllm, rollout.weights bf16/int8; else off)."""
    sampler_c_min: float = 0.0
    """Sampler correction: lower bound C_min of the ratio (0: none)."""
    sampler_c_max: Optional[float] = 2.0
    """Sampler correction: upper bound C_max of the ratio (TRL's default is 3.0 with sequence_mask; null:
    none, mask modes only)."""
    off_policy_mask_threshold: Optional[float] = None
    """DeepSeek-V3.2's off-policy sequence mask: a negative-advantage sequence whose mean log pi_sampler -
    log pi over its tokens exceeds this leaves the loss (the old policy stands in without sampler
    log-probs); null disables."""
    top_entropy_quantile: float = 1.0
    """Policy gradient only on this top share of each micro-batch's tokens by entropy (0.2: "Beyond the
    80/20 rule"); 1 keeps every token."""
    norm_length: int = 0
    """seq-mean-token-sum-norm divisor; 0 uses rollout.max_new_tokens."""
    iterations: int = 1
    """Policy updates per rollout batch (mu in the GRPO paper)."""
    beta: float = 0.0
    """KL coefficient to a frozen reference policy; 0 loads no reference."""
    kl_estimator: str = "k3"
    """KL estimator: k1, k2 or k3."""
    kl_in: str = "loss"
    """Where the KL goes: in the loss, or subtracted from the reward per token (reward)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0: off); with adaptive_entropy, its starting value."""
    adaptive_entropy: bool = False
    """Skywork-OR1's adaptive entropy control: after each step the coefficient rises by entropy_coef_delta
    while the mean token entropy is at or below entropy_target and falls otherwise (within
    [entropy_coef_min, entropy_coef_max]); the bonus applies only while the entropy is at or below the
    target. The coefficient is in the checkpoint: a resumed run goes on with it."""
    entropy_target: float = 0.2
    """adaptive_entropy: target mean token entropy (nats)."""
    entropy_coef_delta: float = 0.005
    """adaptive_entropy: step of the coefficient."""
    entropy_coef_min: float = 0.0
    """adaptive_entropy: lowest coefficient."""
    entropy_coef_max: float = 1.0
    """adaptive_entropy: highest coefficient."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and sample more prompts to fill the batch (DAPO)."""
    max_refill: int = 3
    """dynamic_sampling: at most this many extra rollout rounds per step."""
    mask_truncated: bool = False
    """Leave completions cut at max_new_tokens out of the loss."""
    ref_sync_every: int = 0
    """Refresh the reference policy every this many steps (0: never)."""
    ref_mixup: float = 1.0
    """At a refresh, ref = mixup * policy + (1 - mixup) * ref."""
    value_lr: float = 1e-4
    """ppo: learning rate of the value head."""
    value_coef: float = 0.5
    """ppo: weight of the value loss."""
    value_clip: float = 0.2
    """ppo: value clip range around the rollout-time values."""
    gamma: float = 1.0
    """ppo: discount."""
    lam: float = 0.95
    """ppo: GAE lambda."""
