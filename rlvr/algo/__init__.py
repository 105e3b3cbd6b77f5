"""Pure tensor functions of the RL objective: no config objects, no globals. Shapes in each docstring."""
from rlvr.algo.advantages import (ESTIMATORS, estimate_advantages, gae, gpg_advantages, group_advantages,
                                  opo_advantages, passk_advantages, rloo_advantages, token_returns, whiten)
from rlvr.algo.kl import kl_estimate, split_beta
from rlvr.algo.losses import (AGGREGATIONS, LOG_RATIO_LIMIT, aggregate, clipped_surrogate, drop_nonfinite,
                              loss_units, policy_ratio, sequence_ratio, value_loss)
from rlvr.algo.masks import last_token_mask, present_tokens, row_widths
from rlvr.algo.policy import OBJECTIVE_DEFAULTS, OBJECTIVES, policy_loss
from rlvr.algo.sampler import (SAMPLER_MODES, adaptive_entropy_coef, entropy_bonus, entropy_bonus_coef,
                               high_entropy_mask, off_policy_mask, sampler_weights, tis_weights)

__all__ = ["AGGREGATIONS", "ESTIMATORS", "LOG_RATIO_LIMIT", "OBJECTIVES", "OBJECTIVE_DEFAULTS", "SAMPLER_MODES",
           "adaptive_entropy_coef", "aggregate", "clipped_surrogate", "drop_nonfinite", "entropy_bonus",
           "entropy_bonus_coef", "estimate_advantages", "gae", "gpg_advantages", "group_advantages", "high_entropy_mask", "kl_estimate",
           "last_token_mask", "loss_units", "off_policy_mask", "opo_advantages", "passk_advantages", "policy_loss",
           "policy_ratio", "present_tokens", "rloo_advantages", "row_widths", "sampler_weights", "sequence_ratio",
           "split_beta", "tis_weights", "token_returns", "value_loss", "whiten"]
