"""Soft overlong punishment (DAPO, Yu et al. 2025): 0 up to max_len - buffer, then falling linearly
to -penalty at max_len, so that the policy learns to finish before it is cut off."""
from __future__ import annotations

from rlvr.rewards.base import Reward, Verdict


def overlong_score(length: int, max_len: int, buffer: int, penalty: float = 1.0) -> float:
    free = max_len - buffer
    if length <= free or buffer <= 0:
        return 0.0
    return -penalty * min(length - free, buffer) / buffer


def make_overlong_reward(max_len: int, buffer: int, penalty: float = 1.0) -> Reward:
    """TRL-style reward f(completions, completion_ids, **kw); lengths are token counts."""

    def verdicts(completions, completion_ids=None, **kwargs) -> list[Verdict]:
        if completion_ids is None:
            raise ValueError("the overlong reward needs the completion_ids column (token ids)")
        out = []
        for ids in completion_ids:
            s = overlong_score(len(ids), max_len, buffer, penalty)
            out.append(Verdict(s, f"{len(ids)} tokens" + ("" if s == 0 else f", {max_len - len(ids)} from the cap")))
        return out

    return Reward(name="overlong", verdicts=verdicts, checks_correctness=False, doc=make_overlong_reward.__doc__)
