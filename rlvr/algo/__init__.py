"""Pure tensor functions of the RL objective: no config objects, no globals. Shapes in each docstring."""
from rlvr.algo.advantages import gae, group_advantages, rloo_advantages, token_returns, whiten
from rlvr.algo.kl import kl_estimate
from rlvr.algo.losses import aggregate, entropy_from_logits, policy_loss, sequence_ratio, value_loss

__all__ = ["aggregate", "entropy_from_logits", "gae", "group_advantages", "kl_estimate", "policy_loss",
           "rloo_advantages", "sequence_ratio", "token_returns", "value_loss", "whiten"]
