"""Reward plumbing: verdicts, TRL-style completions, and scoring a batch with named weighted functions."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlvr.errors import RlvrError
from rlvr.rewards.call import Reward, RewardLog, Verdict, as_scores, completion_text, invoke, run_all
from rlvr.rewards.verl import VERL_PREFIX, from_compute_score
from rlvr.tasks.base import as_text


MAX_REASON_CHARS = 300
PYTHON_PREFIX = "python:"  # names a callable handed to rlvr.fit (by its __name__): config.yaml cannot hold it


def clean_reason(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Printable text of bounded length: a reason may quote a program's exception message, and
    control characters (terminal escapes, carriage returns, bidi overrides) must not reach the
    console, logs or report as themselves (a hostile program chooses them). Each becomes its backslash escape."""
    text = str(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def batch_form(verdict_fn: Callable[..., Verdict], columns: tuple[str, ...],
               verdicts_fn: Callable[..., list[Verdict]] | None = None, **abilities) -> Reward:
    """A one-item verdict function as a Reward: a TRL reward f(completions, **columns) -> list[float]
    with `.verdict(completion, *column_values) -> Verdict` and `.verdicts(completions, **columns)`;
    pass `verdicts_fn` for a batch form that does better than one call per item (a worker pool, say),
    and the Reward's other fields (checks_correctness, code_outcome, config) as keywords.
    """

    def verdicts(completions, **kwargs) -> list[Verdict]:
        cols = [[as_text(v) for v in kwargs[c]] for c in columns]  # a dataset's raw value (12, a list) as text
        texts = [completion_text(c) for c in completions]
        if verdicts_fn is not None:
            return verdicts_fn(texts, *cols)
        return [verdict_fn(t, *vals) for t, *vals in zip(texts, *cols)]

    return Reward(name=verdict_fn.__name__.removesuffix("_verdict"), verdicts=verdicts, verdict=verdict_fn,
                  columns=columns,
                  doc=verdict_fn.__doc__ or "", **abilities)


class RewardFunctionError(RlvrError):
    """A reward function failed on every completion of a batch: a bug in it, not a bad completion."""


@dataclass(kw_only=True)
class RewardFunction:
    """A reward of a run: its name (in metrics and reports), its weight, the function, and its
    rewards.weights key when that differs from the name (a .py file's path: rlvr.rewards.base.short_name)."""

    name: str
    weight: float
    fn: Callable  # a Reward (rlvr's built-ins, verl scorers) or a user's plain TRL-style function
    key: str = ""

    @property
    def spec(self) -> str:
        """The rewards.weights key that names this reward: what a message tells the user to write."""
        return self.key or self.name

    @property
    def reward(self) -> Reward | None:
        """The Reward with what rlvr knows about the function; None for a plain function."""
        return self.fn if isinstance(self.fn, Reward) else None

    @property
    def checks_correctness(self) -> bool | None:
        """Does it pay for right answers? A Reward's field; a user's plain function may say so itself with a
        `checks_correctness` attribute (README: the grader and the audit read it); None when it does not say."""
        if self.reward is not None:
            return self.reward.checks_correctness
        said = getattr(self.fn, "checks_correctness", None)   # the user's own marker on their function
        return None if said is None else bool(said)


@dataclass(kw_only=True)
class Scores:
    """Per-function scores and reasons for B completions, their weighted total, and which completions
    each function failed on (raised). Errors are kept per completion so that selecting rows (dynamic
    sampling keeps some groups of a round) counts exactly the selected rows' errors."""

    per_function: dict[str, list[float]]
    reasons: dict[str, list[str]]
    total: list[float]
    failed: dict[str, list[bool]]
    extra: dict[str, list] = field(default_factory=dict)  # TRL's log_extra columns, one value per completion
    logged: dict[str, float] = field(default_factory=dict)  # TRL's log_metric scalars, averaged

    @property
    def errors(self) -> dict[str, int]:
        """Completions each function failed on: reward/<name>/errors."""
        return {k: sum(v) for k, v in self.failed.items()}

    def select(self, rows: list[int]) -> "Scores":
        pick = lambda d: {k: [v[i] for i in rows] for k, v in d.items()}
        return Scores(per_function=pick(self.per_function), reasons=pick(self.reasons),
                      total=[self.total[i] for i in rows], failed=pick(self.failed),
                      extra=pick(self.extra), logged=self.logged)

    @staticmethod
    def concat(parts: list["Scores"]) -> "Scores":
        join = lambda field: {k: [x for p in parts for x in getattr(p, field)[k]] for k in parts[0].per_function}
        extra = {k: [x for p in parts for x in p.extra[k]] for k in parts[0].extra if all(k in p.extra for p in parts)}
        return Scores(per_function=join("per_function"), reasons=join("reasons"),
                      total=[x for p in parts for x in p.total], failed=join("failed"),
                      extra=extra, logged=parts[0].logged)


def strict_rewards(rewards: list[RewardFunction], unknown_is_strict: bool = False) -> list[RewardFunction]:
    """The rewards that check correctness (Reward.checks_correctness), in order: the first one is what
    pass rates and the curriculum read. A plain function says nothing of itself: it is strict only when
    `unknown_is_strict` (rlvr audit holds unknown user functions to every attack)."""
    return [rf for rf in rewards if (unknown_is_strict if rf.checks_correctness is None else rf.checks_correctness)]


def load_callable(spec: str, what: str) -> Callable:
    """'module:function' or 'path/to/file.py:function' (verl's custom_reward_function.path form)."""
    module_name, _, attr = spec.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            loader = importlib.util.spec_from_file_location(path.stem, path)
            if loader is None or not path.exists():
                raise ImportError(f"no such file {path}")
            module = importlib.util.module_from_spec(loader)
            sys.modules[path.stem] = module  # as an import would: dataclasses and pickling look it up there
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise RlvrError(f"cannot load {what} '{spec}': {e}") from None
    if not callable(fn):
        raise RlvrError(f"{what} '{spec}' is not callable")
    return fn


def resolve(name: str, weight: float, builtins: dict[str, Callable]) -> RewardFunction:
    """A built-in by name; 'module:function' (a TRL-style reward); 'verl:module:function' (verl's
    one-sample compute_score, rlvr/rewards/verl.py). A module may be a .py file's path."""
    if name in builtins:
        return RewardFunction(name=name, weight=weight, fn=builtins[name])
    if name.startswith(PYTHON_PREFIX) or name.startswith(VERL_PREFIX + PYTHON_PREFIX):
        fn = name.rsplit(":", 1)[-1]
        raise RlvrError(f"reward '{name}' is a Python function given to rlvr.fit, which config.yaml cannot "
                        f"hold: pass it again, e.g. rlvr.fit(resume=RUN_DIR, rewards={{{fn}: "
                        f"{weight}, ...}}) with the run's other Python rewards")
    if ":" not in name:
        raise RlvrError(f"unknown reward '{name}' in rewards.weights: built in: {', '.join(builtins)}, "
                        "'module:function' (TRL's form) or 'verl:module:compute_score'")
    if name.startswith(VERL_PREFIX):
        fn = load_callable(name[len(VERL_PREFIX):], "verl compute_score")
        return RewardFunction(name=short_name(name), weight=weight, fn=from_compute_score(fn), key=name)
    return RewardFunction(name=short_name(name), weight=weight, fn=load_callable(name, "reward function"), key=name)


def short_name(spec: str) -> str:
    """A reward's name in metrics and reports: its spec with a .py file's folders left out, so a run keeps
    its names when config.yaml holds the file's absolute path (rlvr.config.paths)."""
    module, sep, attr = spec.rpartition(":")
    head, colon, path = module.rpartition(":")
    if not path.endswith(".py"):
        return spec
    return f"{head}{colon}{Path(path).name}{sep}{attr}"


def _row(columns: dict[str, list], i: int) -> dict[str, list]:
    return {k: v[i:i + 1] for k, v in columns.items()}


def _outcome(result, n: int):
    """(scores, reasons) of one call's result, or the exception it raised or its unreadable return made."""
    if isinstance(result, BaseException):
        return result
    try:
        return as_scores(result, n)
    except Exception as e:  # a bad return is that call's failure, like a raise
        return e


def _each_row(rf: RewardFunction, completions: list, columns: dict[str, list], shared: dict) -> list:
    """A failed batch call retried one completion at a time: (scores, reasons) of one, or the exception."""
    outs = run_all([lambda i=i: invoke(rf.fn, completions[i:i + 1], _row(columns, i), shared)
                    for i in range(len(completions))])
    return [_outcome(out, 1) for out in outs]


def _stop(name: str, error: Exception, origin: str, completion) -> RewardFunctionError:
    # the exception's message may quote model text: each line printable, the lines kept
    trace = "\n".join(clean_reason(line, 2000) for line in "".join(traceback.format_exception(error)).splitlines())
    return RewardFunctionError(
        f"reward function '{name}' raised on every completion of the batch, so the run stops (a broken reward "
        f"would look like a run that learned nothing). First row: {origin}; completion "
        f"{clean_reason(completion_text(completion), 200)!r}.\n{trace}")


def score_batch(functions: list[RewardFunction], completions: list, columns: dict[str, list],
                on_error: Callable[[str, Exception], None] | None = None, *, shared: dict | None = None,
                origins: list[str] | None = None, stop_if_all_fail: bool = False) -> Scores:
    """Score every completion with every function, called as TRL calls them (rlvr/rewards/call.py):
    `columns` hold one value per completion, `shared` one value for all (trainer_state; TRL's log_metric
    and log_extra are added, their records kept in Scores.logged and Scores.extra). The functions
    run together (async ones concurrently). A batch call that raises is retried one completion at a
    time: the completions it still fails on score 0 and are marked in `failed`, and training goes on;
    when it fails on every one and stop_if_all_fail, RewardFunctionError names the row (`origins`)."""
    log, n = RewardLog(), len(completions)
    shared = {"log_metric": log.metric, "log_extra": log.extra, **(shared or {})}
    firsts = run_all([lambda rf=rf: invoke(rf.fn, completions, columns, shared) for rf in functions])
    per, reasons, failed = {}, {}, {}
    for rf, first in zip(functions, firsts):
        whole = _outcome(first, n)
        if not isinstance(whole, BaseException):
            per[rf.name], reasons[rf.name] = whole
            failed[rf.name] = [False] * n
            continue
        rows = _each_row(rf, completions, columns, shared) if n > 1 else [whole]
        errors = [r for r in rows if isinstance(r, BaseException)]
        if stop_if_all_fail and n and len(errors) == n:
            raise _stop(rf.name, errors[0], (origins or ["row 1"])[0], completions[0])
        if errors and on_error is not None:
            on_error(rf.name, errors[0])
        ok = lambda r: not isinstance(r, BaseException)
        per[rf.name] = [r[0][0] if ok(r) else 0.0 for r in rows]
        reasons[rf.name] = [r[1][0] if ok(r) else f"reward function raised {type(r).__name__}: {r}" for r in rows]
        failed[rf.name] = [not ok(r) for r in rows]
    reasons = {k: [clean_reason(x) for x in v] for k, v in reasons.items()}
    total = [sum(rf.weight * per[rf.name][i] for rf in functions) for i in range(n)]
    extra = {k: v for k, v in log.extras.items() if len(v) == n}  # a column of another length fits no sample
    return Scores(per_function=per, reasons=reasons, total=total, failed=failed, extra=extra, logged=log.means())
