"""verl's reward functions, used as they are: `compute_score(data_source, solution_str, ground_truth,
extra_info)` scores one sample and returns a number or a dict with "score" (its other keys are kept as
the reason). Named in rewards.weights as 'verl:module:compute_score' (or 'verl:path/to/file.py:name').

The arguments come from the row as verl's parquet files lay it out: `data_source`, the ground truth
from `reward_model.ground_truth` (else a `ground_truth` column, else rlvr's gold answer), `extra_info`.
A function that takes fewer of them (verl's own gsm8k scorer takes solution_str and ground_truth) gets
only those; one whose parameters have other names (prime_math's and math_verify's `model_output`,
geo3k's `predict_str`) is called as verl's default_compute_score calls it, `fn(solution_str,
ground_truth)`. A batch scorer (verl's BatchRewardManager: data_sources, solution_strs, ground_truths,
extra_infos) is called once with the lists.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Callable

from rlvr.rewards.call import Reward, Verdict, accepted, completion_text, then

VERL_PREFIX = "verl:"


def ground_truths(columns: dict[str, list], n: int) -> list:
    """Each row's ground truth, wherever its dataset keeps it."""
    nested = columns.get("reward_model")
    flat = columns.get("ground_truth")
    gold = columns.get("answer", [None] * n)
    out = []
    for i in range(n):
        rm = nested[i] if nested is not None else None
        if isinstance(rm, dict) and "ground_truth" in rm:
            out.append(rm["ground_truth"])
        else:
            out.append(flat[i] if flat is not None else gold[i])
    return out


def verdict_of(result):
    """A Verdict from compute_score's return: a number (a bool counts), a dict with "score" and details, or
    a tuple whose first item is the score (the rest is the reason), as default_compute_score reads them."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"compute_score returned a dict without 'score' (keys {', '.join(map(str, result))})")
        details = ", ".join(f"{k}={v}" for k, v in result.items() if k != "score")
        return Verdict(float(result["score"]), details)
    details = ""
    if isinstance(result, tuple) and result:  # prime_math's (correct, format_ok, extracted): verl scores res[0]
        result, details = result[0], ", ".join(map(str, result[1:]))
    if hasattr(result, "item") and not isinstance(result, (int, float)):  # numpy scalar, 0-d tensor
        result = result.item()
    if not isinstance(result, (int, float)):
        raise ValueError(f"compute_score returned a {type(result).__name__}, expected a number, a dict with "
                         "'score' or a tuple whose first item is the score")
    return Verdict(float(result), details)


def batch_arguments(completions: list, columns: dict[str, list]) -> dict[str, list]:
    """verl's batch reward manager's call: the same arguments, plural, one list each."""
    n = len(completions)
    return {"data_sources": columns.get("data_source", [None] * n),
            "solution_strs": [completion_text(c) for c in completions],
            "ground_truths": ground_truths(columns, n), "extra_infos": columns.get("extra_info", [None] * n)}


async def _each(fn: Callable, calls: list[tuple[tuple, dict]]) -> list:
    return list(await asyncio.gather(*(fn(*a, **k) for a, k in calls)))


def call_form(fn: Callable, named: dict) -> tuple[tuple, dict]:
    """(args, kwargs) for one call: by keyword when every required parameter is one of verl's names,
    else positionally as verl's default_compute_score calls its per-source scorers (solution, truth)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: the keyword call verl's reward manager makes
        return (), named
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if all(p.name in named and p.kind is not p.POSITIONAL_ONLY for p in required):
        return (), accepted(fn, named)
    return (named["solution_str"], named["ground_truth"]), {}


def from_compute_score(fn: Callable) -> Reward:
    """A batch reward (rlvr's verdict form) over verl's `fn`: once per completion, or once with lists for
    a batch scorer; an async scorer's calls run concurrently."""
    batched = "solution_strs" in inspect.signature(fn).parameters  # verl's BatchRewardManager form

    def arguments(completions: list, columns: dict[str, list]) -> list[tuple[tuple, dict]]:
        n = len(completions)
        sources, extra = columns.get("data_source", [None] * n), columns.get("extra_info", [None] * n)
        return [call_form(fn, {"data_source": sources[i], "solution_str": completion_text(c), "ground_truth": gt,
                               "extra_info": extra[i]})
                for i, (c, gt) in enumerate(zip(completions, ground_truths(columns, n)))]

    def verdicts(completions, **columns):
        if batched:
            out = fn(**accepted(fn, batch_arguments(completions, columns)))
        elif inspect.iscoroutinefunction(fn):
            out = _each(fn, arguments(completions, columns))
        else:
            out = [fn(*a, **k) for a, k in arguments(completions, columns)]
        return then(out, lambda rs: [verdict_of(r) for r in (rs.tolist() if hasattr(rs, "tolist") else rs)])

    # a verl scorer checks the answer: pass rates and the curriculum read it
    return Reward(name=getattr(fn, "__name__", "compute_score"), verdicts=verdicts, checks_correctness=True, user_fn=fn,
                  doc=getattr(fn, "__doc__", None) or "")
