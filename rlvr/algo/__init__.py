"""Pure tensor functions of the RL objective: no config objects, no globals."""
from rlvr.algo.advantages import group_advantages
from rlvr.algo.kl import kl_estimate
from rlvr.algo.losses import aggregate, policy_loss

__all__ = ["aggregate", "group_advantages", "kl_estimate", "policy_loss"]
