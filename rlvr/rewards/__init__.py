"""Reward functions, called as TRL's GRPOTrainer calls them (rlvr/rewards/call.py): by keyword, with
completions, prompts, completion_ids, every dataset column and trainer_state; -> list[float | None].
verl's one-sample compute_score runs through rlvr/rewards/verl.py.

Each built-in is a `Reward` (rlvr/rewards/call.py): what rlvr knows about it is in its fields
(`checks_correctness`, `columns`, `outcomes`, `config`), and its one-item form,
`fn.verdict(completion, ...) -> Verdict`, gives the reason kept with the sample. A user's plain function
needs none of it.
"""
import importlib
from typing import Callable

from rlvr.errors import RlvrError
from rlvr.rewards.base import (Reward, RewardFunction, Scores, Verdict, completion_text, recipe_of, resolve,
                               score_batch, strict_rewards)
from rlvr.rewards.format import format_reward, make_format_reward
from rlvr.rewards.length import make_overlong_reward, overlong_score
from rlvr.rewards.maths.accuracy import math_accuracy


def env_reward(completions, env_reward=None, **kwargs) -> list[float]:
    """The environment's own score of each episode: a TRL-style environment's get_reward() (env.name
    'module:Class'), passed in as the env_reward column."""
    if env_reward is None or any(v is None for v in env_reward):
        raise ValueError("the env reward needs an environment with get_reward() (env.name 'module:Class')")
    for v in env_reward:
        if isinstance(v, Exception):   # that episode's get_reward() failed (rlvr/envs/base.py)
            raise v
    return [float(v) for v in env_reward]


BUILTINS = {"correctness": math_accuracy, "format": format_reward, "env": env_reward}
LAZY = {"code_tests": "rlvr.rewards.code"}   # built-ins whose module loads the sandbox: imported when named


def __getattr__(name: str):
    """`rlvr.rewards.code_tests` and `make_code_tests` import the code reward (and with it the sandbox)
    on first use, so a maths-only run never loads it."""
    if name in ("code_tests", "make_code_tests"):
        import rlvr.rewards.code as code

        return getattr(code, name)
    raise AttributeError(f"module 'rlvr.rewards' has no attribute {name!r}")


def build_rewards(weights: dict[str, float], max_new_tokens: int = 0, overlong_buffer: int = 0,
                  overlong_penalty: float = 1.0, given: dict[str, Callable] | None = None, *,
                  timeout_s: float = 0.0, isolate: bool = False) -> list[RewardFunction]:
    """Reward functions by name: the built-ins above, `length` (soft overlong punishment against
    max_new_tokens), 'module:function', or a 'python:<name>' callable in `given` (rlvr.fit). The user's
    own ones (files, modules, `given`) get `timeout_s` per call and, with `isolate`, a worker process."""
    builtins = dict(BUILTINS)
    for name, module in LAZY.items():   # every name listed (resolve's error names them); imported only if weighed
        builtins[name] = getattr(importlib.import_module(module), name) if name in weights else None
    builtins.update(given or {})
    if max_new_tokens:
        builtins["length"] = make_overlong_reward(max_new_tokens, overlong_buffer, overlong_penalty)
    functions = [resolve(name, weight, builtins) for name, weight in weights.items()]
    for rf in functions:
        if rf.user or rf.spec in (given or {}):
            rf.user, rf.timeout_s, rf.isolated = True, timeout_s, isolate
            if isolate:
                recipe_of(rf.spec, rf.fn)  # a function the worker cannot load is refused now, by name
    names = [rf.name for rf in functions]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # two files of one name in different folders: the metrics would mix them
        raise RlvrError(f"rewards.weights: two rewards are both named {twice[0]!r} (file names without their "
                        "folders); rename one of the files")
    return functions


def rewards_of(section, max_new_tokens: int, given: dict[str, Callable] | None = None) -> list[RewardFunction]:
    """The reward functions a run optimises, from the rewards section (rlvr.config.RewardsConfig) and
    rollout.max_new_tokens (the length reward's budget): rewards.weights, plus the soft overlong length reward
    when rewards.soft_overlong (DAPO) and rewards.weights does not weigh it itself. Training and `rlvr audit`
    both build them here, so the audit attacks what training optimises."""
    weights = dict(section.weights)
    if section.soft_overlong and "length" not in weights:
        weights["length"] = 1.0
    return build_rewards(weights, max_new_tokens, section.overlong_buffer, section.overlong_penalty, given,
                         timeout_s=section.timeout_s, isolate=section.isolate)


__all__ = ["BUILTINS", "LAZY", "Reward", "RewardFunction", "Scores", "Verdict", "build_rewards", "code_tests",
           "completion_text", "env_reward", "format_reward", "make_code_tests", "make_format_reward",
           "make_overlong_reward", "math_accuracy", "overlong_score", "rewards_of", "score_batch", "strict_rewards"]
