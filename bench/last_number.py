"""The reward bench/vs_trl.py gives both rlvr and TRL: 1.0 when the last integer in a completion is the answer.

TRL's signature, so TRL takes the function object and rlvr takes it by name with bench/ on PYTHONPATH:
`--rewards.weights={last_number:last_number: 1.0}`.
"""
from __future__ import annotations

import re

_INT = re.compile(r"-?\d+")


def last_number(completions, answer, **kwargs) -> list[float]:
    """completions: strings, or chat-message lists (the last message's content is scored); answer: gold strings."""
    scores = []
    for c, gold in zip(completions, answer, strict=True):
        text = c[-1]["content"] if isinstance(c, list) else c
        found = _INT.findall(text)
        scores.append(1.0 if found and found[-1] == str(gold).strip() else 0.0)
    return scores


last_number.checks_correctness = True  # rlvr reads pass_rate/* from the first reward that checks correctness
