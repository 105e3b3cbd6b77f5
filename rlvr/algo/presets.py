"""Named sets of algorithm knobs. A preset is applied first; explicit config keys override it.

Each entry cites where its choices come from; a bare knob is an `algo.*` config key, a dotted one names its
section (DAPO's soft overlong punishment is a reward: `rewards.soft_overlong`). A preset of an objective sets
algo.policy_loss and that objective's knobs at their defaults, from rlvr.algo.objectives' registry
(`_objective`), so a knob's value is written once.
"""
from __future__ import annotations

from rlvr.algo.objectives import knob_defaults


def _objective(name: str) -> dict[str, object]:
    """algo.policy_loss=name and its knobs at their defaults."""
    return {"policy_loss": name, **knob_defaults(name)}


PRESETS: dict[str, dict[str, object]] = {
    # DeepSeekMath (Shao et al. 2024): group-normalised outcome advantages, per-sequence token mean,
    # k3 KL to the reference in the loss with beta 0.04.
    "grpo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-mean",
             "clip_low": 0.2, "clip_high": 0.2, "beta": 0.04, "kl_in": "loss", "kl_estimator": "k3",
             "ratio_level": "token"},
    # Dr. GRPO (Liu et al. 2025): no std scaling, token sums over a constant length, no KL.
    "dr_grpo": {"adv_estimator": "group", "adv_scale": "none", "aggregation": "seq-mean-token-sum-norm",
                "clip_low": 0.2, "clip_high": 0.2, "beta": 0.0, "ratio_level": "token"},
    # DAPO (Yu et al. 2025): clip-higher, token-level mean, dynamic sampling, soft overlong punishment.
    "dapo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "token-mean", "clip_low": 0.2,
             "clip_high": 0.28, "beta": 0.0, "dynamic_sampling": True, "rewards.soft_overlong": True,
             "ratio_level": "token"},
    # GSPO (Zheng et al. 2025): sequence-level ratio, very small clip range.
    "gspo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-mean",
             "clip_low": 3e-4, "clip_high": 4e-4, "beta": 0.0, "ratio_level": "sequence"},
    # RLOO (Ahmadian et al. 2024): leave-one-out baseline, KL folded into the reward.
    "rloo": {"adv_estimator": "rloo", "aggregation": "token-mean", "clip_low": 0.2, "clip_high": 0.2,
             "beta": 0.05, "kl_in": "reward", "kl_estimator": "k1", "ratio_level": "token"},
    # REINFORCE++ (Hu 2025): per-token returns with KL in the reward, whitened over the batch.
    "reinforce_pp": {"adv_estimator": "reinforce_pp", "aggregation": "token-mean", "clip_low": 0.2,
                     "clip_high": 0.2, "beta": 0.01, "kl_in": "reward", "kl_estimator": "k2",
                     "ratio_level": "token"},
    # PPO with a learned critic (value head on the policy trunk), GAE, KL in the reward.
    "ppo": {"adv_estimator": "gae", "aggregation": "token-mean", "clip_low": 0.2, "clip_high": 0.2,
            "beta": 0.05, "kl_in": "reward", "kl_estimator": "k1", "gamma": 1.0, "lam": 0.95,
            "ratio_level": "token"},
    # CISPO (MiniMax-M1, Chen et al. 2025): the importance weight clipped and detached, every token keeps its
    # gradient; no lower bound, upper bound 1 + 4 (ScaleRL's epsilon_max 5, TRL's recommendation), token mean.
    "cispo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "token-mean", **_objective("cispo"),
              "clip_low": 1.0, "clip_high": 4.0, "beta": 0.0, "ratio_level": "token"},
    # SAPO (Gao et al. 2025): soft gates, tau 1.0 / 1.05, per-sequence token mean (verl forces it, TRL's sapo).
    "sapo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-mean",
             **_objective("sapo"), "beta": 0.0, "ratio_level": "token"},
    # GMPO (Zhao et al. 2025): geometric mean of token ratios, log-space clip (e^-0.4, e^0.4), mean over sequences.
    "gmpo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-mean",
             **_objective("gmpo"), "clip_low": 0.4, "clip_high": 0.4, "beta": 0.0, "ratio_level": "token"},
    # GPG (Chu et al. 2025): -A log pi with its own advantage (group-centred, no std, scaled by B / non-zero).
    "gpg": {"adv_estimator": "gpg", "aggregation": "token-mean", **_objective("gpg"), "beta": 0.0,
            "ratio_level": "token"},
    # Clip-Cov and KL-Cov (Cui et al. 2025): 0.02% of tokens; Clip-Cov's band (1, 5) and KL-Cov's coefficient
    # 1 (the registry's defaults), with the paper's clip-higher for Clip-Cov.
    "clip_cov": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "token-mean",
                 **_objective("clip_cov"), "clip_low": 0.2, "clip_high": 0.28, "beta": 0.0, "ratio_level": "token"},
    "kl_cov": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "token-mean", **_objective("kl_cov"),
               "beta": 0.0, "ratio_level": "token"},
    # LUSPO (length-unbiased sequence policy optimization, arXiv 2602.05261): GSPO's sequence ratio, each
    # sequence's token sum (TRL's luspo).
    "luspo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-sum",
              **_objective("ppo"), "clip_low": 3e-4, "clip_high": 4e-4, "beta": 0.0, "ratio_level": "sequence"},
    # VESPO (TRL's vespo): a gamma weight of the whole sequence ratio (k, lambda = 2, 3 and 3, 2), token mean.
    "vespo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "token-mean", **_objective("vespo"),
              "beta": 0.0, "ratio_level": "token"},
}
