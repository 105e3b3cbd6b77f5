"""rlvr: reinforcement learning from verifiable rewards, with GRPO at its core."""

__version__ = "0.1.0"
