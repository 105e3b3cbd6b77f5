"""Format reward: the completion ends with exactly one `Answer: <integer>` line."""
from __future__ import annotations

from rlvr.rewards.answer import final_answers, parse_integer
from rlvr.rewards.base import Verdict, batch_form


def format_reward_verdict(completion: str) -> Verdict:
    """1.0 when the last non-empty line is `Answer: <integer>` and no other final answer is given."""
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    cands = final_answers(completion)
    if not lines or not lines[-1].lower().startswith("answer:"):
        return Verdict(0.0, "does not end with an 'Answer:' line")
    if len(cands) != 1:
        return Verdict(0.0, f"{len(cands)} final answers, expected one")
    if parse_integer(cands[0]) is None:
        return Verdict(0.0, "the answer is not a plain integer", cands[0])
    return Verdict(1.0, "well formed", cands[0])


format_reward = batch_form(format_reward_verdict, ())
