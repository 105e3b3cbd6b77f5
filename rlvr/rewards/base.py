"""Reward plumbing: verdicts, TRL-style completions, and scoring a batch with named weighted functions."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from rlvr.errors import RlvrError


@dataclass(frozen=True)
class Verdict:
    """One completion's score under one reward function, with the reason the samples show."""

    score: float
    reason: str
    extracted: str | None = None


MAX_REASON_CHARS = 300


def clean_reason(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Printable text of bounded length: a reason may quote a program's exception message, and
    control characters (terminal escapes, carriage returns, bidi overrides) must not reach the
    console, logs or report as themselves (issue 13). Each becomes its backslash escape."""
    text = str(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def completion_text(completion) -> str:
    """TRL passes either a string or a list of chat messages; the last assistant content is scored."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def batch_form(verdict_fn: Callable[..., Verdict], columns: tuple[str, ...],
               verdicts_fn: Callable[..., list[Verdict]] | None = None):
    """Turn a one-item verdict function into a TRL reward f(completions, **columns) -> list[float].

    The reward also carries `.verdict(completion, *column_values) -> Verdict` and
    `.verdicts(completions, **columns) -> list[Verdict]`; pass `verdicts_fn` for a batch form that
    does better than one call per item (a worker pool, say).
    """

    def verdicts(completions, **kwargs) -> list[Verdict]:
        cols = [kwargs[c] for c in columns]
        texts = [completion_text(c) for c in completions]
        if verdicts_fn is not None:
            return verdicts_fn(texts, *cols)
        return [verdict_fn(t, *vals) for t, *vals in zip(texts, *cols)]

    def reward(completions, **kwargs) -> list[float]:
        return [v.score for v in verdicts(completions, **kwargs)]

    reward.verdict = verdict_fn
    reward.verdicts = verdicts
    reward.columns = columns
    reward.__name__ = verdict_fn.__name__.removesuffix("_verdict")
    reward.__doc__ = verdict_fn.__doc__
    return reward


@dataclass
class RewardFunction:
    name: str
    weight: float
    fn: Callable


@dataclass
class Scores:
    """Per-function scores and reasons for B completions, their weighted total, and which completions
    each function failed on (raised). Errors are kept per completion so that selecting rows (dynamic
    sampling keeps some groups of a round) counts exactly the selected rows' errors."""

    per_function: dict[str, list[float]]
    reasons: dict[str, list[str]]
    total: list[float]
    failed: dict[str, list[bool]]

    @property
    def errors(self) -> dict[str, int]:
        """Completions each function failed on: reward/<name>/errors."""
        return {k: sum(v) for k, v in self.failed.items()}

    def select(self, rows: list[int]) -> "Scores":
        pick = lambda d: {k: [v[i] for i in rows] for k, v in d.items()}
        return Scores(pick(self.per_function), pick(self.reasons), [self.total[i] for i in rows], pick(self.failed))

    @staticmethod
    def concat(parts: list["Scores"]) -> "Scores":
        join = lambda field: {k: [x for p in parts for x in getattr(p, field)[k]] for k in parts[0].per_function}
        return Scores(join("per_function"), join("reasons"), [x for p in parts for x in p.total], join("failed"))


def strict_rewards(rewards: list[RewardFunction], unknown_is_strict: bool = False) -> list[RewardFunction]:
    """The rewards that check correctness (`fn.checks_correctness`), in order: the first one is what
    pass rates and the curriculum read. A function that does not say is strict only when
    `unknown_is_strict` (rlvr audit holds unknown user functions to every attack)."""
    return [rf for rf in rewards if getattr(rf.fn, "checks_correctness", unknown_is_strict)]


def resolve(name: str, weight: float, builtins: dict[str, Callable]) -> RewardFunction:
    if name in builtins:
        return RewardFunction(name, weight, builtins[name])
    if ":" not in name:
        raise RlvrError(f"unknown reward '{name}' in rewards.weights: built in: {', '.join(builtins)}, "
                        "or give 'module:function'")
    module_name, attr = name.split(":", 1)
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise RlvrError(f"cannot load reward function '{name}': {e}") from None
    if not callable(fn):
        raise RlvrError(f"reward '{name}' is not callable")
    return RewardFunction(name, weight, fn)


def _run_one(rf: RewardFunction, completions: list[str], columns: dict[str, list]) -> tuple[list[float], list[str]]:
    verdicts = getattr(rf.fn, "verdicts", None)
    if verdicts is not None:
        vs = verdicts(completions, **columns)
        return [v.score for v in vs], [clean_reason(v.reason) for v in vs]
    values = rf.fn(completions, **columns)
    if not isinstance(values, (list, tuple)) or len(values) != len(completions):
        raise ValueError(f"returned {type(values).__name__} of length "
                         f"{len(values) if hasattr(values, '__len__') else '?'}, expected a list of {len(completions)}")
    scores = [0.0 if v is None else float(v) for v in values]
    return scores, ["not applicable" if v is None else "" for v in values]


def score_batch(functions: list[RewardFunction], completions: list[str], columns: dict[str, list],
                on_error: Callable[[str, Exception], None] | None = None) -> Scores:
    """Score every completion with every function. A function that raises scores the whole batch 0
    and each of its completions is marked in `failed`; training goes on."""
    per, reasons, failed = {}, {}, {}
    for rf in functions:
        try:
            per[rf.name], reasons[rf.name] = _run_one(rf, completions, columns)
            failed[rf.name] = [False] * len(completions)
        except Exception as e:  # a user's reward must not end the run
            per[rf.name] = [0.0] * len(completions)
            reasons[rf.name] = [clean_reason(f"reward function raised {type(e).__name__}: {e}")] * len(completions)
            failed[rf.name] = [True] * len(completions)
            if on_error is not None:
                on_error(rf.name, e)
    total = [sum(rf.weight * per[rf.name][i] for rf in functions) for i in range(len(completions))]
    return Scores(per, reasons, total, failed)
