"""rlvr.fit's callbacks, in TRL's habit: objects whose `on_step_end` is called after each step with the
step's metrics row, and may add metrics to it and stop the run.

    class Watch:
        def on_step_end(self, step, metrics, control):
            if metrics["reward/mean"] > 0.9:
                control.should_training_stop = True  # ends the run after this step, as its last
            return {"custom/twice_reward": 2 * metrics["reward/mean"]}  # added to the step's row

    rlvr.fit(..., callbacks=[Watch()])

What a callback returns (a mapping of new metric names to numbers, or None) is added to the step's row
before it is written: metrics.jsonl, the trackers, the health rules and report.html see it. A run a callback
stops ends as a finished one (its checkpoint, the final evaluation, final/, summary.json with `stopped_by`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlvr.errors import RlvrError


@dataclass
class Control:
    """What a callback may ask of the loop (TRL's TrainerControl field of the same name)."""

    should_training_stop: bool = False


def check_callbacks(callbacks: list) -> list:
    """Each callback has an on_step_end, checked before anything loads."""
    callbacks = list(callbacks or [])
    for cb in callbacks:
        if not callable(getattr(cb, "on_step_end", None)):
            raise RlvrError(f"rlvr.fit(callbacks=...): {_name(cb)} has no on_step_end method; a callback is an "
                            "object with on_step_end(step, metrics, control) (README, \"Callbacks\")")
    return callbacks


def run_callbacks(callbacks: list, step: int, metrics: dict) -> str | None:
    """Call each callback's on_step_end(step, a copy of the row, control) in order; what each returns is
    added to `metrics`. Returns the name of the first callback that set control.should_training_stop."""
    control, stopped_by = Control(), None
    for cb in callbacks:
        added = cb.on_step_end(step, dict(metrics), control)
        for key, value in _metrics(cb, added).items():
            if key in metrics:  # a step's own numbers stay what rlvr measured
                raise RlvrError(f"{_name(cb)}.on_step_end returned {key!r}, a metric the step already has: "
                                "give a new name (e.g. custom/...)")
            metrics[key] = value
        if control.should_training_stop and stopped_by is None:
            stopped_by = _name(cb)
    return stopped_by


def _metrics(cb, added) -> dict:
    """A callback's return checked: None, or new metric names (str) to finite numbers."""
    if added is None:
        return {}
    if not isinstance(added, dict):
        raise RlvrError(f"{_name(cb)}.on_step_end returned {type(added).__name__}: return None or a dict of "
                        "new metric names to numbers")
    for key, value in added.items():
        if not isinstance(key, str) or key == "step":
            raise RlvrError(f"{_name(cb)}.on_step_end returned the metric name {key!r}: a name is a string "
                            "other than 'step'")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RlvrError(f"{_name(cb)}.on_step_end returned {key}={value!r}: a metric is a finite number")
    return added


def _name(cb) -> str:
    return getattr(cb, "__name__", None) or type(cb).__name__
