"""Reward plumbing: verdicts, TRL-style completions, and scoring a batch with named weighted functions."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlvr.errors import RlvrError
from rlvr.rewards.call import (CallTimedOut, Reward, RewardLog, Verdict, as_scores, completion_text, invoke,
                               run_all)
from rlvr.rewards.verl import VERL_PREFIX, from_compute_score
from rlvr.io import load_callable
from rlvr.text import as_text, clean_reason, traceback_text  # noqa: F401 - clean_reason: rewards.base's too


PYTHON_PREFIX = "python:"  # names a callable handed to rlvr.fit (by its __name__): config.yaml cannot hold it


def batch_form(verdict_fn: Callable[..., Verdict], columns: tuple[str, ...],
               verdicts_fn: Callable[..., list[Verdict]] | None = None, **abilities) -> Reward:
    """A one-item verdict function as a Reward: a TRL reward f(completions, **columns) -> list[float]
    with `.verdict(completion, *column_values) -> Verdict` and `.verdicts(completions, **columns)`;
    pass `verdicts_fn` for a batch form that does better than one call per item (a worker pool, say),
    and the Reward's other fields (checks_correctness, outcomes, config) as keywords.
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
    rewards.weights key when that differs from the name (a .py file's path: rlvr.rewards.base.short_name).
    A user's function (`user`) is called in a thread under `timeout_s` (0: no limit), or with `isolated`
    in a worker process (rlvr/rewards/isolated.py); rlvr's built-ins run in the caller's thread."""

    name: str
    weight: float
    fn: Callable  # a Reward (rlvr's built-ins, verl scorers) or a user's plain TRL-style function
    key: str = ""
    user: bool = False
    timeout_s: float = 0.0
    isolated: bool = False

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
    outcomes: dict[str, list[str]] = field(default_factory=dict)  # Verdict.outcome per completion ("": none)

    @property
    def errors(self) -> dict[str, int]:
        """Completions each function failed on: reward/<name>/errors."""
        return {k: sum(v) for k, v in self.failed.items()}

    def select(self, rows: list[int]) -> "Scores":
        pick = lambda d: {k: [v[i] for i in rows] for k, v in d.items()}
        return Scores(per_function=pick(self.per_function), reasons=pick(self.reasons),
                      total=[self.total[i] for i in rows], failed=pick(self.failed),
                      extra=pick(self.extra), logged=self.logged, outcomes=pick(self.outcomes))

    @staticmethod
    def concat(parts: list["Scores"]) -> "Scores":
        join = lambda field: {k: [x for p in parts for x in getattr(p, field)[k]] for k in parts[0].per_function}
        extra = {k: [x for p in parts for x in p.extra[k]] for k in parts[0].extra if all(k in p.extra for p in parts)}
        return Scores(per_function=join("per_function"), reasons=join("reasons"),
                      total=[x for p in parts for x in p.total], failed=join("failed"),
                      extra=extra, logged=parts[0].logged, outcomes=join("outcomes"))


def strict_rewards(rewards: list[RewardFunction], unknown_is_strict: bool = False) -> list[RewardFunction]:
    """The rewards that check correctness (Reward.checks_correctness), in order: the first one is what
    pass rates and the curriculum read. A plain function says nothing of itself: it is strict only when
    `unknown_is_strict` (rlvr audit holds unknown user functions to every attack)."""
    return [rf for rf in rewards if (unknown_is_strict if rf.checks_correctness is None else rf.checks_correctness)]


def defined_at(rf: "RewardFunction") -> str:
    """'FILE:LINE, function NAME': where a reward's own function is defined (a verl scorer's compute_score)."""
    fn = rf.reward.user_fn if rf.reward is not None and rf.reward.user_fn is not None else rf.fn
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__call__", None), "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return f"{code.co_filename}:{code.co_firstlineno}, function {name}" if code else f"function {name}"


def recipe_of(spec: str, fn) -> tuple:
    """How the worker process of rewards.isolate (rlvr/rewards/isolated_worker.py) rebuilds reward `spec` (a
    rewards.weights key; `fn` what the trainer resolved it to): ("spec", spec) for a name it loads itself,
    else ("pickled", bytes, verl) for a function given to rlvr.fit, pickled by reference (a module-level
    function of an importable module). RlvrError, naming it, for one that cannot cross (a lambda, a
    closure, a function of the notebook or script)."""
    if not spec.removeprefix(VERL_PREFIX).startswith(PYTHON_PREFIX):
        return ("spec", spec)
    own = getattr(fn, "user_fn", None) or fn
    name = getattr(own, "__qualname__", repr(own))
    if getattr(own, "__module__", None) == "__main__" or "<locals>" in name or "<lambda>" in name:
        raise RlvrError(f"rewards.isolate: reward '{spec}' ({name} in {getattr(own, '__module__', '?')}) cannot be "
                        "loaded by the worker process: define it at the top level of an importable module (a .py "
                        "file on the import path) and pass it from there, or leave rewards.isolate off")
    try:
        return ("pickled", pickle.dumps(own), getattr(fn, "user_fn", None) is not None)
    except Exception as e:  # noqa: BLE001 - whatever pickle refuses, the message says which function
        raise RlvrError(f"rewards.isolate: reward '{spec}' cannot be sent to the worker process "
                        f"({type(e).__name__}: {e}); leave rewards.isolate off for it") from None


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
    if ":" not in name and name.endswith(".py"):  # a file without the function to call in it
        raise RlvrError(f"reward '{name}' in rewards.weights names a file, not a function in it: write "
                        f"'{name}:FUNCTION' (TRL's form) or 'verl:{name}:compute_score'")
    if ":" not in name:
        raise RlvrError(f"unknown reward '{name}' in rewards.weights: built in: {', '.join(builtins)}, "
                        "'module:function' (TRL's form) or 'verl:module:compute_score'")
    if name.startswith(VERL_PREFIX):
        fn = load_callable(name[len(VERL_PREFIX):], "verl compute_score")
        return RewardFunction(name=short_name(name), weight=weight, fn=from_compute_score(fn), key=name, user=True)
    return RewardFunction(name=short_name(name), weight=weight, fn=load_callable(name, "reward function"), key=name,
                          user=True)


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


class RewardTimeoutError(RlvrError):
    """A user reward ran past rewards.timeout_s in the trainer's process, where it cannot be stopped."""


def _plain_copy(value):
    """A copy of the data a reward is given: lists, dicts, tuples and sets rebuilt all the way down, and
    dataclass state (trainer_state) copied; any other object (an episode's environment instance, which
    may hold locks or a process) is passed as it is, since copying it would be wrong, not just slow."""
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, (tuple, set, frozenset)):
        return type(value)(_plain_copy(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return copy.copy(value)
    return value


def _own_copy(completions: list, columns: dict[str, list], shared: dict) -> tuple[list, dict, dict]:
    """Inputs of one call that no other call sees: a reward that edits its completions or columns in place
    changes neither the next reward's nor the samples. TRL's log_metric and log_extra stay the shared ones."""
    return _plain_copy(completions), _plain_copy(columns), {k: _plain_copy(v) for k, v in shared.items()}


def _call(rf: RewardFunction, completions: list, columns: dict, shared: dict, log: RewardLog) -> Callable[[], object]:
    """One call of `rf` as a thunk, on its own copy of the inputs; under rewards.isolate, in the worker process
    of the current run (rlvr.rewards.workers), whose log records join this scoring's."""
    completions, columns, shared = _own_copy(completions, columns, shared)
    if not rf.isolated:
        return lambda: invoke(rf.fn, completions, columns, shared)

    def in_worker():
        from rlvr.rewards.workers import current

        plain = {k: v for k, v in shared.items() if not callable(v)}
        result, logged = current().user.call(recipe_of(rf.spec, rf.fn), completions, columns, plain, rf.timeout_s)
        if logged is not None:
            for name, values in logged.metrics.items():
                log.metrics.setdefault(name, []).extend(values)
            for column, values in logged.extras.items():
                log.extra(column, values)
        return result
    return in_worker


def _run(rf_calls: list[tuple[RewardFunction, Callable[[], object]]]) -> list:
    """Each call's result or exception: a user's function in a thread under its limit (rlvr.rewards.call.run_all),
    rlvr's own and isolated ones here (the worker process has the limit)."""
    limits = [rf.timeout_s if rf.user and not rf.isolated else None for rf, _ in rf_calls]
    results = run_all([thunk for _, thunk in rf_calls], limits)
    return [CallTimedOut(rf.timeout_s) if isinstance(r, CallTimedOut) and rf.isolated else r
            for (rf, _), r in zip(rf_calls, results)]


def _stop_on_timeout(rf: RewardFunction, result, rows: str) -> None:
    """A call past its limit in this process: its thread cannot be stopped, so the run stops, naming it."""
    if isinstance(result, CallTimedOut) and not rf.isolated:
        raise RewardTimeoutError(
            f"reward function '{rf.name}' ({defined_at(rf)}) did not return within rewards.timeout_s="
            f"{rf.timeout_s:g}s on {rows}, so the run stops (a call in the trainer's process cannot be "
            "stopped); make it faster, raise rewards.timeout_s, or set rewards.isolate=true to run it in a "
            "worker process where a call past the limit is killed and scores 0")


def _outcome(result, n: int):
    """(scores, reasons) of one call's result, or the exception it raised or its unreadable return made."""
    if isinstance(result, BaseException):
        return result
    try:
        return as_scores(result, n)
    except Exception as e:  # a bad return is that call's failure, like a raise
        return e


def _each_row(rf: RewardFunction, completions: list, columns: dict[str, list], shared: dict, log: RewardLog,
              origins: list[str]) -> list:
    """A failed batch call retried one completion at a time: (scores, reasons) of one, or the exception."""
    outs = _run([(rf, _call(rf, completions[i:i + 1], _row(columns, i), shared, log)) for i in range(len(completions))])
    for i, out in enumerate(outs):
        _stop_on_timeout(rf, out, f"row {origins[i]}")
    return [_outcome(out, 1) for out in outs]


def _stop(rf: RewardFunction, error: BaseException, origin: str, completion) -> RewardFunctionError:
    where = f" ({defined_at(rf)})" if rf.user else ""
    return RewardFunctionError(
        f"reward function '{rf.name}'{where} raised on every completion of the batch, so the run stops (a broken "
        f"reward would look like a run that learned nothing). First row: {origin}; completion "
        f"{clean_reason(completion_text(completion), 200)!r}.\n{traceback_text(error)}")


def failure_reason(error: BaseException) -> str:
    """What a sample's reason says of a call that failed."""
    if isinstance(error, CallTimedOut):
        return f"reward function {error}"
    return f"reward function raised {type(error).__name__}: {error}"


def score_batch(functions: list[RewardFunction], completions: list, columns: dict[str, list],
                on_error: Callable[[str, BaseException, str], None] | None = None, *, shared: dict | None = None,
                origins: list[str] | None = None, stop_if_all_fail: bool = False) -> Scores:
    """Score every completion with every function, called as TRL calls them (rlvr/rewards/call.py):
    `columns` hold one value per completion, `shared` one value for all (trainer_state; TRL's log_metric
    and log_extra are added, their records kept in Scores.logged and Scores.extra). Each call gets its own
    copy of the inputs. The functions run together (async ones concurrently); a user's function in a
    thread under its rewards.timeout_s, or in a worker process (rewards.isolate). A batch call that raises
    (any BaseException: sys.exit() in a reward ends nothing), returns what is not one finite number or
    None per completion, or overruns in the worker, is retried one completion at a time: the completions
    it still fails on score 0 and are marked in `failed`, on_error(name, first error, its row) is told,
    and training goes on; when it fails on every one and stop_if_all_fail, RewardFunctionError names
    the row (`origins`). A call that overruns in the trainer's process stops the run (RewardTimeoutError)."""
    log, n = RewardLog(), len(completions)
    origins = origins or [f"row {i + 1} of the batch" for i in range(n)]
    shared = {"log_metric": log.metric, "log_extra": log.extra, **(shared or {})}
    firsts = _run([(rf, _call(rf, completions, columns, shared, log)) for rf in functions])
    per, reasons, failed, outcomes = {}, {}, {}, {}
    for rf, first in zip(functions, firsts):
        _stop_on_timeout(rf, first, f"a batch of {n} completions (first row: {origins[0] if n else '-'})")
        whole = _outcome(first, n)
        if not isinstance(whole, BaseException):
            per[rf.name], reasons[rf.name], outcomes[rf.name] = whole
            failed[rf.name] = [False] * n
            continue
        rows = _each_row(rf, completions, columns, shared, log, origins) if n > 1 else [whole]
        errors = [(r, origins[i]) for i, r in enumerate(rows) if isinstance(r, BaseException)]
        if stop_if_all_fail and n and len(errors) == n:
            raise _stop(rf, errors[0][0], origins[0], completions[0])
        if errors and on_error is not None:
            on_error(rf.name, *errors[0])
        ok = lambda r: not isinstance(r, BaseException)
        per[rf.name] = [r[0][0] if ok(r) else 0.0 for r in rows]
        reasons[rf.name] = [r[1][0] if ok(r) else failure_reason(r) for r in rows]
        outcomes[rf.name] = [r[2][0] if ok(r) else "" for r in rows]
        failed[rf.name] = [not ok(r) for r in rows]
    reasons = {k: [clean_reason(x) for x in v] for k, v in reasons.items()}
    total = [sum(rf.weight * per[rf.name][i] for rf in functions) for i in range(n)]
    extra = {k: v for k, v in log.extras.items() if len(v) == n}  # a column of another length fits no sample
    return Scores(per_function=per, reasons=reasons, total=total, failed=failed, extra=extra, logged=log.means(),
                  outcomes=outcomes)
