"""Pure tensor functions of the RL objective: no config objects, no globals. Shapes in each docstring."""
from rlvr.algo.advantages import gae, group_advantages, rloo_advantages, token_returns, whiten
from rlvr.algo.kl import kl_estimate, split_beta
from rlvr.algo.losses import (AGGREGATIONS, LOG_RATIO_LIMIT, aggregate, drop_nonfinite, loss_units, policy_loss,
                              sequence_ratio, tis_weights, value_loss)

__all__ = ["AGGREGATIONS", "LOG_RATIO_LIMIT", "aggregate", "drop_nonfinite", "gae", "group_advantages",
           "kl_estimate", "loss_units", "policy_loss", "rloo_advantages", "sequence_ratio", "split_beta", "tis_weights",
           "token_returns", "value_loss", "whiten"]
