"""What a user imports and constructs: the names README.md and docs/*.md promise, each under the module it is
imported from, and how a user type's construction form changes (a deprecation first, never a break).

tests/test_public.py imports every name listed here, builds each documented construction form, and fails on a
`rlvr.<module>.<name>` that the docs mention and this list lacks. A name leaves this list only after a release
that warned about it. This module imports nothing of rlvr: every package may use `positional_too`.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

SURFACE: dict[str, tuple[str, ...]] = {
    # rlvr.fit: the run `rlvr train` runs, from Python (README "Python API")
    "rlvr": ("fit", "openmp_wait"),
    # the pure tensor functions of the objective (README "Algorithms")
    "rlvr.algo": ("estimate_advantages", "group_advantages", "rloo_advantages", "gae", "whiten", "kl_estimate",
                  "split_beta", "aggregate", "loss_units", "policy_loss", "value_loss", "tis_weights",
                  "passk_advantages", "opo_advantages", "gpg_advantages", "sampler_weights", "off_policy_mask",
                  "high_entropy_mask", "adaptive_entropy_coef"),
    "rlvr.algo.objectives": ("REGISTRY",),
    # reward functions: the built-ins a config names and what a one-item form returns (README "rewards.weights")
    "rlvr.rewards": ("math_accuracy", "format_reward", "code_tests", "Reward", "Verdict"),
    # an rlvr Environment: reset(problem) -> messages, step(text) -> Reply, reward_columns() (README
    # "Environments and tools"; rlvr/envs/base.py)
    "rlvr.envs.base": ("Environment", "Reply", "SingleTurn", "ToolEnv"),
    "rlvr.tasks": ("Problem",),
    # the config-level pieces (README "Python API")
    "rlvr.config": ("build_config",),
    "rlvr.train.grpo": ("train",),
    # reading a run's outputs (README "Outputs", docs/gpu.md)
    "rlvr.models": ("load_model", "base_model_path"),
    "rlvr.eval": ("evaluate", "pass_at_k", "majority_vote"),
}


def positional_too(*documented: str):
    """A keyword-only dataclass that users also build by position: its fields in order may be passed
    positionally, the `documented` leading ones as the docs write them, any later one with a
    DeprecationWarning (a form that worked before the class became keyword-only keeps working, and says
    to name the field). Inside rlvr such a class is still built by keyword (tests/test_dataclass_keywords.py)."""
    def wrap(cls):
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        assert list(documented) == names[:len(documented)], (cls.__name__, documented, names)
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__}() takes at most {len(names)} positional arguments "
                                f"({', '.join(names)}), {len(args)} given")
            if len(args) > len(documented):
                later = ", ".join(names[len(documented):len(args)])
                warnings.warn(f"{cls.__name__}: pass {later} by keyword ({later.split(', ')[0]}=...); "
                              "by position is deprecated", DeprecationWarning, stacklevel=2)
            for name, value in zip(names, args):
                if name in kwargs:
                    raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
                kwargs[name] = value
            init(self, **kwargs)

        cls.__init__ = __init__
        cls.__positional__ = tuple(documented)
        return cls
    return wrap
