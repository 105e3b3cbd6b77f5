"""rlvr: reinforcement learning from verifiable rewards, with GRPO at its core.

`rlvr.fit(model=..., rewards={fn: 1.0}, train_dataset=rows, **overrides)` runs what `rlvr train` runs,
from Python (rlvr/api.py)."""

from rlvr.api import fit

__version__ = "0.1.0"
__all__ = ["fit"]
