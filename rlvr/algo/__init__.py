"""Pure tensor functions of the RL objective: no config objects, no globals. Shapes in each docstring."""
from rlvr.algo.advantages import (ESTIMATORS, estimate_advantages, gae, group_advantages, rloo_advantages,
                                  token_returns, whiten)
from rlvr.algo.kl import kl_estimate, split_beta
from rlvr.algo.masks import last_token_mask, present_tokens, row_widths
from rlvr.algo.losses import (AGGREGATIONS, LOG_RATIO_LIMIT, aggregate, drop_nonfinite, loss_units, policy_loss,
                              sequence_ratio, tis_weights, value_loss)

__all__ = ["AGGREGATIONS", "ESTIMATORS", "LOG_RATIO_LIMIT", "aggregate", "drop_nonfinite", "estimate_advantages",
           "gae", "group_advantages", "kl_estimate", "last_token_mask", "loss_units", "policy_loss", "present_tokens",
           "rloo_advantages", "row_widths", "sequence_ratio", "split_beta", "tis_weights", "token_returns",
           "value_loss", "whiten"]
