"""Named sets of algorithm knobs. A preset is applied first; explicit config keys override it.

Each entry cites where its choices come from; a bare knob is an `algo.*` config key, a dotted one names its
section (DAPO's soft overlong punishment is a reward: `rewards.soft_overlong`). The preset of an objective
(cispo, sapo, ...) is its entry's in rlvr.algo.objectives' registry: algo.policy_loss, that objective's knobs
at their defaults and the entry's `preset` keys (`presets()`), so an objective and its values are written once.
"""
from __future__ import annotations

from rlvr.algo.objectives import REGISTRY, knob_defaults


def _objective(name: str) -> dict[str, object]:
    """algo.policy_loss=name and its knobs at their defaults."""
    return {"policy_loss": name, **knob_defaults(name)}


NAMED: dict[str, dict[str, object]] = {
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
    # LUSPO (length-unbiased sequence policy optimization, arXiv 2602.05261): GSPO's sequence ratio, each
    # sequence's token sum (TRL's luspo).
    "luspo": {"adv_estimator": "group", "adv_scale": "group", "aggregation": "seq-mean-token-sum",
              **_objective("ppo"), "clip_low": 3e-4, "clip_high": 4e-4, "beta": 0.0, "ratio_level": "sequence"},
}


def presets() -> dict[str, dict[str, object]]:
    """Every preset, by name: the named sets above, then each registry objective's (read now, so an objective
    added to the registry has its preset)."""
    own = {name: {**_objective(name), **entry.preset} for name, entry in REGISTRY.items() if entry.preset is not None}
    twice = sorted(set(own) & set(NAMED))
    assert not twice, f"an objective and a named preset share the name {twice}"
    return {**NAMED, **own}


PRESETS = presets()  # as the registry holds them at import
