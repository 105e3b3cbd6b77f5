"""Problems, splits, and turning a problem into a chat prompt."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from rlvr.public import positional_too
from rlvr.text import as_text  # noqa: F401 - tasks.base.as_text, as before


HELDOUT_SIZE = 100  # task.heldout_size when null, but for a small train file (rlvr.tasks.files.scaled_heldout)


@positional_too("question", "answer")  # a user's Environment and tests build Problem(question, answer)
@dataclass(kw_only=True, frozen=True)
class Problem:
    """One verifiable prompt. `columns` are passed to reward functions as keyword lists (TRL style)."""

    question: str  # the user turn
    answer: str  # gold answer, as text
    difficulty: str = ""
    tests: str = ""  # code tasks: the JSON test spec (rlvr.rewards.code)
    solution: str = ""  # a worked solution ending in the answer, for SFT and few-shot turns
    # a conversational dataset's prompt as given (TRL's message lists); question is its last user turn
    messages: tuple[dict, ...] = field(default=(), hash=False, compare=False)
    # every other column of the dataset row, as given (nested values kept): reward functions get each by name
    row: dict = field(default_factory=dict, hash=False, compare=False)
    origin: str = ""  # where the problem came from, e.g. "data.jsonl line 3" (file tasks), for errors

    def columns(self) -> dict[str, object]:
        """The reward-function keyword columns: the row's own columns, then rlvr's gold `answer`, and
        `difficulty` and `tests` when the problem has them (a column the data lacks is not passed:
        a reward's `difficulty=None` default then holds)."""
        own = self.row.get("answer")
        # the dataset's own answer as it is (TRL passes 12, not "12") when it is the gold; else the gold
        gold = own if own is not None and as_text(own) == self.answer else self.answer
        cols = {**self.row, "answer": gold}
        if self.difficulty:
            cols["difficulty"] = self.difficulty
        if self.tests:
            cols["tests"] = self.tests
        return cols

    @property
    def prompt(self):
        """The prompt as the dataset gave it (TRL's `prompts`): the message list, else the text."""
        if not self.messages:
            return self.question
        return [*(dict(m) for m in self.messages[:-1]), {**self.messages[-1], "content": self.question}]


@dataclass(kw_only=True)
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


def problem_messages(problem: Problem, few_shot: list[tuple[str, str]], system_prompt: str = "") -> list[dict]:
    """The chat before the model's first turn. A conversational prompt keeps its own messages (its
    last user turn is `question`, template applied); the task's system prompt goes first unless the
    prompt has its own, and few-shot turns follow the leading system messages."""
    if not problem.messages:
        return chat_messages(problem.question, few_shot, system_prompt)
    messages = problem.prompt
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    system = [{"role": "system", "content": system_prompt}] if system_prompt and not head else []
    shots = [m for q, a in few_shot for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    return system + messages[:head] + shots + messages[head:]


def encode_messages(tok, messages: list[dict]) -> list[int]:
    """Token ids of a chat, ending with the assistant turn's opening."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def encode_prompt(tok, question: str, few_shot: list[tuple[str, str]], system_prompt: str = "") -> list[int]:
    """Token ids of the chat prompt, ending with the assistant turn's opening."""
    return encode_messages(tok, chat_messages(question, few_shot, system_prompt))


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
