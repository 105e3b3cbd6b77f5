"""Problems, splits, and turning a problem into a chat prompt."""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One verifiable prompt. `columns` are passed to reward functions as keyword lists (TRL style)."""

    question: str  # the user turn
    answer: str  # gold answer, as text
    difficulty: str = ""
    tests: str = ""  # code tasks: the JSON test spec (rlvr.rewards.code)
    solution: str = ""  # a worked solution ending in the answer, for SFT and few-shot turns

    def columns(self) -> dict[str, object]:
        cols = {"answer": self.answer, "difficulty": self.difficulty}
        if self.tests:
            cols["tests"] = self.tests
        return cols


@dataclass
class Splits:
    train: list[Problem]
    heldout: list[Problem]
    ood: list[Problem]
    few_shot: list[tuple[str, str]] = field(default_factory=list)  # (question, worked answer) turns
    notes: list[str] = field(default_factory=list)  # warnings for the user: duplicates removed, sizes cut


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def chat_messages(question: str, few_shot: list[tuple[str, str]], system_prompt: str = "") -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for q, a in few_shot:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages + [{"role": "user", "content": question}]


def encode_prompt(tok, question: str, few_shot: list[tuple[str, str]], system_prompt: str = "") -> list[int]:
    """Token ids of the chat prompt, ending with the assistant turn's opening."""
    text = tok.apply_chat_template(chat_messages(question, few_shot, system_prompt),
                                   add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


class Epochs:
    """Seeded epochs over a fixed pool of indices: every item once before any repeats. rlvr sft draws its
    examples this way, and the curriculum its prompts (mode none over all of train, else one per level)."""

    def __init__(self, pool: range | list[int], seed: int | str):
        self.pool, self.rng = list(pool), random.Random(seed)
        self.order: list[int] = []

    def take(self, k: int) -> list[int]:
        picked = []
        while len(picked) < k:
            if not self.order:
                self.order = list(self.pool)
                self.rng.shuffle(self.order)
            picked.append(self.order.pop())
        return picked

    def state_dict(self) -> dict:
        """Plain lists and numbers (safe for torch.load(weights_only=True) and JSON)."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "order": list(self.order)}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.order = list(state["order"])
