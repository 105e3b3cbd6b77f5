"""Environments: every task is one. An environment gets a problem, gives the chat messages before the
model's first turn, answers each model turn (a tool result, a follow-up, or done), and says at the end
what the reward functions should see besides the final answer.

    env.reset(problem) -> messages          system prompt, worked turns, the question
    env.step(text) -> Reply                 after each model turn: Reply(text, role) or Reply(done=True)
    env.reward_columns() -> dict            extra reward-function keyword columns for this episode

`SingleTurn` is every task as it always was: the prompt, one answer, done. `ToolEnv` lets the model call
tools by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call> (rlvr/envs/tools.py); it also
runs a TRL-style environment class (TRL's `environment_factory` convention): `reset(**row)` may return
text added to the question, its public methods are tools, an optional `get_reward()` is scored by the
`env` reward. One environment object serves one episode.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from rlvr.envs.metrics import UNKNOWN
from rlvr.envs.tools import Tool, ToolCall, parse_tool_calls, run_calls, tool_prompt, tools_from_object
from rlvr.tasks.base import Problem, chat_messages


@dataclass
class Reply:
    """The environment's answer to one model turn."""

    text: str = ""  # the next turn's content (unused when done)
    role: str = "tool"  # its chat role: tool (a tool result) or user (a follow-up)
    done: bool = False
    calls: list[dict] = field(default_factory=list)  # the turn's tool calls: {"name", "error"} ("" when it ran)


class Environment(Protocol):
    def reset(self, problem: Problem) -> list[dict]:
        """The chat messages before the model's first turn (the same for every episode of a problem)."""

    def step(self, text: str) -> Reply:
        """Answer the model's turn (decoded, special tokens dropped)."""

    def reward_columns(self) -> dict:
        """Keyword columns for the reward functions about this episode ({} for none)."""


class SingleTurn:
    """The task's prompt (system prompt, few-shot turns, question); the first answer ends the episode."""

    def __init__(self, few_shot: list[tuple[str, str]], system_prompt: str = ""):
        self.few_shot, self.system_prompt = few_shot, system_prompt

    def reset(self, problem: Problem) -> list[dict]:
        return chat_messages(problem.question, self.few_shot, self.system_prompt)

    def step(self, text: str) -> Reply:
        return Reply(done=True)

    def reward_columns(self) -> dict:
        return {}


def row_of(problem: Problem) -> dict:
    """The dataset row a TRL-style reset(**row) receives: the reward columns and the prompt."""
    return {"prompt": problem.question, "question": problem.question, **problem.columns()}


class ToolEnv:
    """Tool use: each model turn's tool calls are run and their results are the next turn; a turn with no
    call ends the episode. Malformed calls, unknown tools and tools that raise answer with an error
    message (counted in the turn's calls), never end the run.

    tools: the built-in tools offered; obj: a TRL-style environment instance (its public methods join
    the tools); system_prompt: the task's; describe: put the tools' description and the call format in
    the system prompt (for chat templates without tool support; otherwise the template renders them);
    example: worked turns shown before the question; few_shot: the task's (question, answer) turns;
    budget_s: the wall-clock seconds the episode may wait on its tool calls in all (env.tool_budget_s;
    None: no budget)."""

    def __init__(self, tools: list[Tool], obj=None, system_prompt: str = "", describe: bool = True,
                 example: list[dict] = (), few_shot: list[tuple[str, str]] = (), budget_s: float | None = None):
        self.obj = obj
        self.budget_s, self.spent_s = (float("inf") if budget_s is None else budget_s), 0.0
        own = tools_from_object(obj) if obj is not None else []
        self.tools = {t.name: t for t in [*tools, *own]}
        system = "\n\n".join(s for s in (system_prompt, tool_prompt(list(self.tools.values())) if describe else "") if s)
        self.head = ([{"role": "system", "content": system}] if system else []) + [dict(m) for m in example]
        self.few_shot = list(few_shot)

    def reset(self, problem: Problem) -> list[dict]:
        question = problem.question
        if self.obj is not None and hasattr(self.obj, "reset"):
            extra = self.obj.reset(**row_of(problem))
            if extra:
                question = f"{question}\n\n{extra}"
        return self.head + chat_messages(question, self.few_shot)

    def step(self, text: str) -> Reply:
        calls = parse_tool_calls(text)
        if not calls:
            return Reply(done=True)
        results, record = [], []
        started = time.monotonic()
        answers = run_calls(self.tools, calls, self.budget_s - self.spent_s)
        self.spent_s += time.monotonic() - started
        for call, (result, error) in zip(calls, answers):  # a call that could not be read: its error
            results.append(f"Error: {error}" if error else result)
            # the name is the model's string: only a tool's own name is recorded (it becomes a metric
            # key, env/tool_calls/<name>); the error quotes any other, escaped (issue 27)
            record.append({"name": call.name if call.name in self.tools else (call.name and UNKNOWN),
                           "error": error})
        return Reply("\n".join(results), "tool", calls=record)

    def reward_columns(self) -> dict:
        if self.obj is not None and callable(getattr(self.obj, "get_reward", None)):
            return {"env_reward": float(self.obj.get_reward())}
        return {}


__all__ = ["Environment", "Reply", "SingleTurn", "Tool", "ToolCall", "ToolEnv", "row_of"]
