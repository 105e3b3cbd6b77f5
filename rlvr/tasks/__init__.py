"""Task sources. `build_splits(task_config)` returns train / held-out / OOD problems."""
from __future__ import annotations

from rlvr.errors import RlvrError
from rlvr.tasks.arithmetic import arithmetic_splits
from rlvr.tasks.base import Problem, PromptSampler, Splits, chat_messages, encode_prompt, normalise

TASKS = ("arithmetic",)


def build_splits(task) -> Splits:
    if task.name == "arithmetic":
        return arithmetic_splits(task.digits, task.operands, task.operators, task.ood_digits,
                                 task.ood_operands, task.heldout_size, task.ood_size, task.train_size,
                                 task.few_shot, task.seed)
    raise RlvrError(f"unknown task '{task.name}': built in: {', '.join(TASKS)}")


__all__ = ["Problem", "PromptSampler", "Splits", "build_splits", "chat_messages", "encode_prompt", "normalise"]
