"""Calling a reward function as TRL's GRPOTrainer calls it, and reading back what it returns.

TRL's convention (GRPOTrainer, TRL 1.16): every argument by keyword, `prompts` and `completions` (text, or
lists of chat messages when the dataset is conversational), `completion_ids` (token-id lists), every dataset
column under its own name (one value per completion), `trainer_state`, `log_metric(name, value)` and
`log_extra(column, values)` (TRL 1.x), and `**kwargs` for the rest. An `async def` function is awaited, all
of a step's concurrently. The return is one value per completion, a list, numpy array or tensor; None (or
NaN) means "does not apply": it adds nothing to the weighted total, as TRL's nansum over the functions.
"""
from __future__ import annotations

import asyncio
import inspect
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from rlvr.public import positional_too

NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class Verdict:
    """One completion's score under one reward function, with the reason the samples show and, for a
    reward that classifies what happened (the code reward: Reward.outcomes), the outcome as a field:
    metrics count it, never read it back from the reason's words."""

    score: float
    reason: str
    extracted: str | None = None
    outcome: str = field(default="", kw_only=True)


def then(result, f: Callable):
    """f(result), or for an awaitable result (an async scorer) an awaitable of it."""
    if not inspect.isawaitable(result):
        return f(result)

    async def later():
        return f(await result)
    return later()


@positional_too()  # built by position before it was keyword-only: still accepted, with a warning
@dataclass(kw_only=True, eq=False)
class Reward:
    """A reward function with what rlvr knows about it, as fields. Called as TRL calls a reward function,
    `reward(completions, **columns) -> list[float]`; `verdicts` gives the same scores with their reasons.
    rlvr's built-ins are Rewards; a user's plain TRL-style function needs none of this and says nothing of
    itself (rlvr calls it as TRL does)."""

    name: str
    verdicts: Callable[..., list[Verdict]]
    """(completions, **columns) -> one Verdict per completion (an awaitable of them for an async scorer)."""
    verdict: Callable[..., Verdict] | None = None
    """(completion, *column values) -> Verdict: one completion, for evaluation and the audit."""
    columns: tuple[str, ...] = ()
    """The dataset columns it compares with (a gold `answer`, a `tests` spec)."""
    checks_correctness: bool = False
    """It pays for right answers, not form: pass rates, the curriculum and rlvr audit's attacks read it."""
    outcomes: tuple[str, ...] = ()
    """The outcomes its verdicts name in Verdict.outcome (the code reward's: the code/<outcome>_frac metrics)."""
    config: object = None
    """The settings it was made with (the code reward's CodeTestsConfig)."""
    user_fn: Callable | None = None
    """The user's own function it calls (a verl scorer's compute_score), for diagnosing a failing call."""
    doc: str = ""

    def __post_init__(self):
        self.__name__ = self.name   # TRL names a reward function's logs by its __name__
        self.__doc__ = self.doc or self.__doc__

    def __call__(self, completions, **kwargs) -> list[float]:
        return then(self.verdicts(completions, **kwargs), lambda vs: [v.score for v in vs])


@dataclass
class TrainerState:
    """What TRL passes as `trainer_state`: the step being scored (0-based) of max_steps."""

    global_step: int = 0
    max_steps: int = 0
    log_history: list = field(default_factory=list)


@dataclass
class RewardLog:
    """What TRL's `log_metric` and `log_extra` receive during one scoring: scalars per metric name
    (averaged into the step's metrics) and values per extra column (one per completion, extended call by
    call as TRL's completions table does; shown in the samples)."""

    metrics: dict[str, list[float]] = field(default_factory=dict)
    extras: dict[str, list] = field(default_factory=dict)

    def metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(str(name), []).append(float(value))

    def extra(self, column: str, values: list) -> None:
        self.extras.setdefault(str(column), []).extend(values)

    def means(self) -> dict[str, float]:
        return {name: sum(v) / len(v) for name, v in self.metrics.items() if v}


RESERVED = ("completions", "prompts", "completion_ids", "trainer_state", "log_metric", "log_extra")  # TRL's own


def dataset_columns(problems: list, g: int) -> dict[str, list]:
    """The keyword columns of a batch of rlvr Problems, G completions each: every dataset column under its
    own name (None where a row lacks it), rlvr's `answer`, and `prompts` (each as the dataset gave it)."""
    rows = [{k: v for k, v in p.columns().items() if k not in RESERVED} for p in problems]
    keys = list(dict.fromkeys(k for c in rows for k in c))
    columns = {k: [c.get(k) for c in rows for _ in range(g)] for k in keys}
    columns["prompts"] = [p.prompt for p in problems for _ in range(g)]
    return columns


def as_chat(problem, text: str):
    """A completion in the dataset's form: a message list for a conversational prompt (TRL), else text."""
    return [{"role": "assistant", "content": text}] if problem.messages else text


def completion_text(completion) -> str:
    """TRL passes either a string or a list of chat messages; the last message's content is scored
    (an episode's final model turn)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def accepted(fn: Callable, kwargs: dict) -> dict:
    """The kwargs `fn` can take: every one when it has **kwargs (as TRL's functions must), else its
    named parameters only, so a function written for fewer columns still runs."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: give it everything
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


def invoke(fn: Callable, completions: list, columns: dict[str, list], shared: dict):
    """One call of a reward over a batch: rlvr's built-ins through their verdict form (reasons kept),
    anything else as TRL calls it. Returns what the function returns (an awaitable for async ones)."""
    target = fn.verdicts if isinstance(fn, Reward) else fn
    return target(**accepted(target, {"completions": completions, **columns, **shared}))


class CallTimedOut(Exception):
    """A user reward's call ran past rewards.timeout_s."""

    def __init__(self, timeout_s: float):
        super().__init__(f"did not return within rewards.timeout_s={timeout_s:g}s")
        self.timeout_s = timeout_s


def _in_thread(work: Callable[[], object], timeout_s: float):
    """work() in a daemon thread of its own: its result, or the BaseException it raised (SystemExit,
    KeyboardInterrupt and the rest included: user code ends nothing), or CallTimedOut past timeout_s
    (0: no limit). A thread cannot be killed, so one that overran is left running as a daemon: the caller
    stops the run (rlvr/rewards/base.py), and the process exits without waiting for it. The wait is
    the main thread's, so signal handlers still run while user code hangs."""
    box: list = []
    done = threading.Event()

    def run():
        try:
            box.append(work())
        except BaseException as e:  # noqa: BLE001 - whatever user code raised is that call's outcome
            box.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="rlvr-reward-call", daemon=True).start()
    if not done.wait(timeout_s if timeout_s > 0 else None):
        return CallTimedOut(timeout_s)
    return box[0]


def _await_all(awaitables: list, limits: list) -> list:
    """Each awaitable's result or exception; those with a limit under asyncio.wait_for, and the whole
    gather in a thread of its own, which also bounds a coroutine that blocks the loop."""
    def bounded(aw, limit):
        return asyncio.wait_for(aw, limit) if limit else aw

    async def gather():
        return await asyncio.gather(*(bounded(aw, t) for aw, t in zip(awaitables, limits)), return_exceptions=True)

    def timed_out(results):
        return [CallTimedOut(t) if isinstance(r, asyncio.TimeoutError) and t else r for r, t in zip(results, limits)]

    guarded = [t for t in limits if t is not None]
    if guarded:  # user code: in a thread, so a loop blocked by a synchronous sleep is bounded too
        whole = _in_thread(lambda: asyncio.run(gather()), max(guarded) + 1 if all(guarded) else 0)
        if isinstance(whole, CallTimedOut):
            return [CallTimedOut(t) if t is not None else whole for t in limits]
        return timed_out(whole) if isinstance(whole, list) else [whole] * len(limits)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    with ThreadPoolExecutor(1) as pool:  # inside a running loop (a notebook): a loop of its own in a thread
        return pool.submit(asyncio.run, gather()).result()


def run_all(thunks: list[Callable[[], object]], limits: list[float | None] | None = None) -> list:
    """Each thunk's result or the exception it raised, in order; results that are awaitable (async
    reward functions) are awaited together, concurrently. `limits`, one per thunk: None runs it here
    (rlvr's own code); a number runs user code in a thread under that many seconds (0: no limit), where
    any BaseException it raises is its result and CallTimedOut marks an overrun."""
    limits = limits or [None] * len(thunks)
    results: list = []
    for thunk, limit in zip(thunks, limits):
        if limit is not None:
            results.append(_in_thread(thunk, limit))
            continue
        try:
            results.append(thunk())
        except Exception as e:  # the caller decides what a failing reward means
            results.append(e)
    waiting = [i for i, r in enumerate(results) if inspect.isawaitable(r)]
    awaited = _await_all([results[i] for i in waiting], [limits[i] for i in waiting]) if waiting else ()
    for i, r in zip(waiting, awaited):
        results[i] = r
    return results


def _one(v, i: int) -> tuple[float, str, str]:
    if isinstance(v, Verdict):
        if not math.isfinite(v.score):
            raise ValueError(f"returned a verdict of {v.score} for completion {i}: a score must be a finite number")
        return float(v.score), v.reason, v.outcome
    if hasattr(v, "item") and not isinstance(v, (int, float)):  # numpy scalar, 0-d tensor
        v = v.item()
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return 0.0, NOT_APPLICABLE, ""
    if isinstance(v, (int, float)):
        if math.isinf(v):  # one infinite score makes every advantage of its group NaN or 0
            raise ValueError(f"returned {v} for completion {i}: a score must be a finite number (or None, NaN: "
                             "not applicable)")
        return float(v), "", ""
    raise ValueError(f"returned a {type(v).__name__} for completion {i}, expected a number or None")


def as_scores(values, n: int) -> tuple[list[float], list[str], list[str]]:
    """(scores, reasons, outcomes) from a reward's return: a list, tuple, numpy array or tensor of n numbers, None
    or NaN (not applicable: 0 in the total, as TRL's nansum), or rlvr Verdicts. Else ValueError."""
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or len(values) != n:
        size = len(values) if hasattr(values, "__len__") else "?"
        raise ValueError(f"returned {type(values).__name__} of length {size}, expected a list of {n}")
    triples = [_one(v, i) for i, v in enumerate(values)]
    return [t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples]
