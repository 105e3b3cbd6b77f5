"""The worker process of rewards.isolate (rlvr.rewards.isolated has the trainer's side): rebuilds each
reward from its recipe (rlvr.rewards.base.recipe_of) and answers one frame per call. Whatever the
function raises, sys.exit() included, ends that call, not the worker; os._exit or a crash ends the worker,
and the trainer starts another.

Run as `python -m rlvr.rewards.isolated_worker` (the trainer does this).
"""
from __future__ import annotations

import asyncio
import inspect
import os
import pickle
import traceback

from rlvr.rewards.base import resolve
from rlvr.rewards.call import RewardLog, invoke
from rlvr.rewards.isolated import read_frame, write_frame
from rlvr.rewards.verl import from_compute_score

_built: dict = {}


def _build(recipe: tuple):
    if recipe not in _built:
        if recipe[0] == "spec":
            _built[recipe] = resolve(recipe[1], 1.0, {}).fn
        else:
            fn = pickle.loads(recipe[1])
            if recipe[2]:
                fn = from_compute_score(fn)
            _built[recipe] = fn
    return _built[recipe]


def _plain_args(e: BaseException) -> tuple:
    return e.args if all(isinstance(a, (str, int, float)) for a in e.args) else (str(e),)


def answer(request: dict) -> dict:
    """One call: {"result", "metrics", "extras"} or {"error": (type name, args, traceback text)}."""
    log = RewardLog()
    try:
        fn = _build(request["recipe"])
        shared = {**request["shared"], "log_metric": log.metric, "log_extra": log.extra}
        result = invoke(fn, request["completions"], request["columns"], shared)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
        if hasattr(result, "tolist") and not isinstance(result, (list, tuple)):
            result = result.tolist()
        pickle.dumps(result)  # a return that cannot cross is this call's failure, said here
        return {"result": result, "metrics": log.metrics, "extras": log.extras}
    except BaseException as e:  # noqa: BLE001 - sys.exit() and the rest end this call, not the worker
        return {"error": (type(e).__name__, _plain_args(e), "".join(traceback.format_exception(e)))}


def serve() -> None:
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the reward's prints go to the trainer's stderr, never into the protocol
    write_frame(replies, "ready")
    while (request := read_frame(requests)) is not None:
        write_frame(replies, answer(request))


if __name__ == "__main__":
    serve()
