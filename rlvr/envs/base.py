"""Environments: every task is one. An environment gets a problem, gives the chat messages before the
model's first turn, answers each model turn (a tool result, a follow-up, or done), and says at the end
what the reward functions should see besides the final answer.

    env.reset(problem) -> messages          system prompt, worked turns, the question
    env.step(text) -> Reply                 after each model turn: Reply(text, role) or Reply(done=True)
    env.reward_columns() -> dict            extra reward-function keyword columns for this episode

`SingleTurn` is every task as it always was: the prompt, one answer, done. `ToolEnv` lets the model call
tools by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call> (rlvr/envs/tools.py); it also
runs a TRL-style environment class (TRL's `environment_factory` convention): `reset(**row)` gets every
column of the dataset row (the prompt as given: text or messages) and may return text added to the last
user turn, its public methods are tools, an optional `get_reward()` is scored by the `env` reward. One
environment object serves one episode, so a reset that draws its own random problem gives each episode
its own; the G episodes of a dataset row are its group whatever each drew, as in TRL (episodes.py).
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Protocol

from rlvr.envs.episode_metrics import UNKNOWN
from rlvr.envs.tools import Tool, ToolCall, parse_tool_calls, run_calls, tool_prompt, tools_from_object
from rlvr.errors import RlvrError
from rlvr.public import positional_too
from rlvr.rewards.call import accepted
from rlvr.tasks.base import Problem, problem_messages


@positional_too("text", "role", "done")  # an Environment's step writes Reply(text, role): a user type
@dataclass(kw_only=True)
class Reply:
    """The environment's answer to one model turn: Reply(text, role), Reply(done=True)."""

    text: str = ""  # the next turn's content (unused when done)
    role: str = "tool"  # its chat role: tool (a tool result) or user (a follow-up)
    done: bool = False
    calls: list[dict] = field(default_factory=list)  # the turn's tool calls: {"name", "error"} ("" when it ran)
    error: str = ""  # the environment failed on this turn (rlvr/envs/episodes.py): the episode ends, marked


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
        self.prompt = problem.prompt  # what reward functions get as `prompts`
        return problem_messages(problem, self.few_shot, self.system_prompt)

    def step(self, text: str) -> Reply:
        return Reply(done=True)

    def reward_columns(self) -> dict:
        return {}


def row_of(problem: Problem) -> dict:
    """The dataset row a TRL-style reset(**row) receives: every column (rlvr's answer among them) and
    the prompt as the dataset gave it."""
    return {"question": problem.question, **problem.columns(), "prompt": problem.prompt}


def with_extra(prompt, extra: str):
    """A prompt (text, or messages ending with a user turn) with a reset's text added to its last turn."""
    if isinstance(prompt, str):
        return f"{prompt}\n\n{extra}"
    return [*prompt[:-1], {**prompt[-1], "content": f"{prompt[-1]['content']}\n\n{extra}"}]


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
        self.system_prompt, self.example, self.few_shot = system_prompt, [dict(m) for m in example], list(few_shot)
        self.described = tool_prompt(list(self.tools.values())) if describe else ""

    def reset(self, problem: Problem) -> list[dict]:
        self.prompt, self.added = problem.prompt, ""  # what reward functions get as `prompts`; reset's text
        if self.obj is not None and callable(getattr(self.obj, "reset", None)):
            row = row_of(problem)
            try:
                extra = self.obj.reset(**accepted(self.obj.reset, row))
            except TypeError as e:  # most often a reset that names a column the dataset lacks
                raise RlvrError(f"{type(self.obj).__name__}.reset: {e}; it gets the row's columns "
                                f"({', '.join(row)}) by name") from None
            except Exception as e:  # noqa: BLE001 - no model text reached it: a bug in the class, named where
                frame = traceback.extract_tb(e.__traceback__)[-1]
                raise RlvrError(f"{type(self.obj).__name__}.reset raised {type(e).__name__}: {e} "
                                f"({frame.filename}:{frame.lineno}) on {problem.origin or repr(problem.question[:60])}") from e
            if extra:
                self.added = str(extra)
                self.prompt = with_extra(self.prompt, self.added)
                question = with_extra(problem.question, str(extra))
                problem = dataclasses.replace(problem, question=question)
        messages = problem_messages(problem, self.few_shot)
        has_own = messages[0]["role"] == "system"  # a chat prompt's own system turn wins over the task's
        system = "\n\n".join(s for s in (messages[0]["content"] if has_own else self.system_prompt, self.described) if s)
        head = [{"role": "system", "content": system}] if system else []
        return head + self.example + messages[1 if has_own else 0:]

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
            # key, env/tool_calls/<name>); the error quotes any other, escaped
            record.append({"name": call.name if call.name in self.tools else (call.name and UNKNOWN),
                           "error": error})
        return Reply(text="\n".join(results), role="tool", calls=record)

    def reward_columns(self) -> dict:
        if self.obj is not None and callable(getattr(self.obj, "get_reward", None)):
            try:
                return {"env_reward": float(self.obj.get_reward())}
            except Exception as e:  # noqa: BLE001 - what the episode left behind is this episode's failure
                # the env reward raises it for this episode alone: scored 0, its reason in samples.jsonl
                return {"env_reward": EnvRewardFailed(f"{type(self.obj).__name__}.get_reward() raised "
                                                      f"{type(e).__name__}: {e}")}
        return {}


class EnvRewardFailed(Exception):
    """An episode's get_reward() that raised or gave no number: its env_reward column, raised again by
    the `env` reward for that episode."""


__all__ = ["EnvRewardFailed", "Environment", "Reply", "SingleTurn", "Tool", "ToolCall", "ToolEnv", "row_of"]
