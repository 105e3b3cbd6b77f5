"""rlvr.fit's callbacks (rlvr/train/callbacks.py): what on_step_end returns joins the step's row, a stop is
the first callback's that asked, and a callback that breaks the rules is named."""
import pytest

from rlvr.errors import RlvrError
from rlvr.train.callbacks import check_callbacks, run_callbacks


class Twice:
    def __init__(self):
        self.seen = []

    def on_step_end(self, step, metrics, control):
        self.seen.append((step, dict(metrics)))
        metrics["reward/mean"] = -1.0  # a copy: the step's own number stays
        return {"custom/twice": 2 * metrics["loss"]}


class StopAt:
    def __init__(self, at):
        self.at = at

    def on_step_end(self, step, metrics, control):
        control.should_training_stop = control.should_training_stop or step >= self.at


def test_what_a_callback_returns_joins_the_row_and_the_first_to_stop_is_named():
    twice, row = Twice(), {"step": 3, "loss": 0.25, "reward/mean": 0.5}
    assert run_callbacks([twice, StopAt(4)], 3, row) is None
    assert row == {"step": 3, "loss": 0.25, "reward/mean": 0.5, "custom/twice": 0.5}
    assert twice.seen == [(3, {"step": 3, "loss": 0.25, "reward/mean": 0.5})]
    assert run_callbacks([StopAt(4), twice, StopAt(1)], 4, {"step": 4, "loss": 1.0}) == "StopAt"


def test_a_callback_that_breaks_the_rules_is_named():
    with pytest.raises(RlvrError, match=r"rlvr.fit\(callbacks=...\): str has no on_step_end method"):
        check_callbacks(["on_step_end"])

    class Bad:
        def __init__(self, returned):
            self.returned = returned

        def on_step_end(self, step, metrics, control):
            return self.returned

    for returned, said in (([1.0], "Bad.on_step_end returned list: return None or a dict"),
                           ({"loss": 1.0}, "Bad.on_step_end returned 'loss', a metric the step already has"),
                           ({"custom/x": float("nan")}, "Bad.on_step_end returned custom/x=nan: a metric is a finite"),
                           ({"custom/x": "high"}, "returned custom/x='high'"), ({1: 2.0}, "the metric name 1")):
        with pytest.raises(RlvrError) as e:
            run_callbacks(check_callbacks([Bad(returned)]), 1, {"step": 1, "loss": 0.5})
        assert said in str(e.value)
