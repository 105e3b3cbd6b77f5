"""Reward functions with the TRL signature f(completions, **columns) -> list[float | None].

Each built-in also has a one-item form, `fn.verdict(completion, ...) -> Verdict`, whose reason is
kept with the sample.
"""
from rlvr.rewards.base import RewardFunction, Scores, Verdict, completion_text, resolve, score_batch
from rlvr.rewards.format import format_reward
from rlvr.rewards.math import math_accuracy

BUILTINS = {"correctness": math_accuracy, "format": format_reward}


def build_rewards(weights: dict[str, float]) -> list[RewardFunction]:
    return [resolve(name, weight, BUILTINS) for name, weight in weights.items()]


__all__ = ["BUILTINS", "RewardFunction", "Scores", "Verdict", "build_rewards", "completion_text",
           "format_reward", "math_accuracy", "score_batch"]
