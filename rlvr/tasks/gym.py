"""reasoning-gym datasets (`reasoning_gym:<dataset>`) as Problems, scored by our own answer checker.

reasoning-gym's own `score_answer` gives partial credit (gold 6 against "16" scores 0.5); we never
call it. Every problem is scored by extracting one final answer and checking it exactly, so the
prompt asks for an answer line and the splits carry a note when some gold answers would not pass
that check as written.
"""
from __future__ import annotations

import dataclasses
import difflib

from rlvr.errors import RlvrError
from rlvr.tasks.base import Problem, Splits, normalise

PREFIX = "reasoning_gym:"
SUFFIX = "End with a line 'Answer: <answer>'."
DEFAULT_TRAIN = 2_000  # train problems when task.train_size is 0 (the generators are unbounded)
_DRAW_FACTOR = 4  # read up to this many entries per wanted problem before giving up on duplicates
_GOLD_CHECKS = 20


def _reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise RlvrError("reasoning_gym tasks need the reasoning-gym package: pip install 'rlvr[gym]'") from None
    return reasoning_gym


def gym_datasets() -> dict[str, dict[str, object]]:
    """reasoning-gym's datasets by name, each with its settings (task.params) and their defaults: what
    `rlvr tasks` lists."""
    registry = _reasoning_gym().factory.DATASETS
    return {name: {f.name: f.default for f in dataclasses.fields(registry[name][1])
                   if f.name not in ("seed", "size") and f.default is not dataclasses.MISSING}
            for name in sorted(registry)}


def make_dataset(dataset: str, params: dict, size: int, seed: int):
    """The reasoning-gym dataset object, with errors that name the setting at fault."""
    rg = _reasoning_gym()
    registry = rg.factory.DATASETS
    if dataset not in registry:
        near = difflib.get_close_matches(dataset, list(registry), n=3)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise RlvrError(f"task.name: reasoning-gym has no dataset '{dataset}'; {hint}"
                        f"it has {len(registry)}, e.g. {', '.join(sorted(registry)[:8])} (`rlvr tasks` lists them all)")
    fields = [f.name for f in dataclasses.fields(registry[dataset][1])]
    reserved = {"seed", "size"} & set(params)
    if reserved:
        raise RlvrError(f"task.params: set {' and '.join(sorted(reserved))} with task.seed / task.train_size, "
                        f"not in the reasoning_gym:{dataset} params")
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise RlvrError(f"reasoning_gym:{dataset} has no setting {', '.join(unknown)}; "
                        f"its settings are {', '.join(f for f in fields if f not in ('seed', 'size'))}")
    try:
        return rg.create_dataset(dataset, seed=seed, size=size, **params)
    except (AssertionError, ValueError, TypeError) as e:
        raise RlvrError(f"reasoning_gym:{dataset} rejected the settings {params}: {e}") from None


def difficulty_label(metadata: dict) -> str:
    """'num_digits=2,num_terms=3' from the entry's values of the dataset's difficulty settings;
    the settings' ranges when the entry does not record its own values."""
    ranges = metadata.get("difficulty") or {}
    own = [f"{k}={metadata[k]}" for k in sorted(ranges)
           if isinstance(metadata.get(k), (int, float, str)) and not isinstance(metadata.get(k), bool)]
    if own:
        return ",".join(own)
    return ",".join(f"{k}={'-'.join(map(str, v)) if isinstance(v, (tuple, list)) else v}"
                    for k, v in sorted(ranges.items()))


def to_problem(entry: dict, dataset: str, suffix: str) -> Problem:
    if entry.get("answer") is None:
        raise RlvrError(f"reasoning_gym:{dataset} entry {entry.get('metadata', {}).get('source_index')} "
                        f"has no single gold answer; this dataset needs its own reward function")
    question = entry["question"].rstrip()
    return Problem(question=f"{question}\n\n{suffix}" if suffix else question, answer=str(entry["answer"]),
                   difficulty=difficulty_label(entry.get("metadata") or {}))


def distinct_problems(dataset: str, params: dict, n: int, seed: int, suffix: str) -> list[Problem]:
    """Up to n problems with distinct normalised questions, from entry positions 0, 1, 2, ..."""
    if n <= 0:
        return []
    ds = make_dataset(dataset, params, _DRAW_FACTOR * n, seed)
    chosen, seen = [], set()
    for i in range(_DRAW_FACTOR * n):
        p = to_problem(ds[i], dataset, suffix)
        if normalise(p.question) not in seen:
            seen.add(normalise(p.question))
            chosen.append(p)
            if len(chosen) == n:
                break
    return chosen


def gold_check_note(dataset: str, problems: list[Problem]) -> list[str]:
    """A note when a gold answer written as 'Answer: <gold>' does not score 1 with our checker."""
    from rlvr.rewards.maths.accuracy import math_accuracy_verdict  # lazily: rewards is a heavier import

    failed = [p for p in problems[:_GOLD_CHECKS] if math_accuracy_verdict(f"Answer: {p.answer}", p.answer).score != 1.0]
    if not failed:
        return []
    return [f"reasoning_gym:{dataset}: {len(failed)} of {min(len(problems), _GOLD_CHECKS)} gold answers checked "
            f"do not score 1 with the maths checker even when written 'Answer: <gold>' (e.g. {failed[0].answer!r}); "
            f"give this task its own reward function"]


def gym_splits(dataset: str, params: dict, ood_params: dict, heldout_size: int, ood_size: int,
               train_size: int, few_shot: int, seed: int, suffix: str = SUFFIX) -> Splits:
    """Held-out from entry positions [0, heldout_size), few-shot turns next, train after them; OOD from
    the same dataset with ood_params over params and another seed (empty without ood_params)."""
    n_train = train_size or DEFAULT_TRAIN
    pool = distinct_problems(dataset, params, heldout_size + few_shot + n_train, seed, suffix)
    if len(pool) < heldout_size + few_shot + 1:
        raise RlvrError(f"reasoning_gym:{dataset} gave only {len(pool)} distinct problems with {params}: "
                        f"lower task.heldout_size ({heldout_size}) or widen task.params")
    heldout, shots = pool[:heldout_size], pool[heldout_size:heldout_size + few_shot]
    train = pool[heldout_size + few_shot:]
    notes = []
    if train_size and len(train) < train_size:
        notes.append(f"reasoning_gym:{dataset}: task.train_size is {train_size} but only {len(train)} "
                     f"distinct problems were left for train")
    ood = []
    if ood_params:
        ood = distinct_problems(dataset, {**params, **ood_params}, ood_size, seed + 1, suffix)
    elif ood_size:
        notes.append(f"reasoning_gym:{dataset}: no task.ood_params or task.ood_name, so the OOD split is empty")
    notes += gold_check_note(dataset, pool)
    return Splits(train=train, heldout=heldout, ood=ood,
                  few_shot=[(p.question, f"Answer: {p.answer}") for p in shots], notes=notes)
