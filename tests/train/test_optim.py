"""AdamW's step kept only when the weights it makes are finite: an lr of 1e38 or inf with a finite
gradient is undone (weights and optimizer state bit for bit as before); an ordinary lr steps exactly as
a plain AdamW step, with nothing copied."""
import math

import pytest
import torch

from rlvr.train.distributed import Dist
from rlvr.train.optim import adamw, could_overflow, step_keeping_finite


def model_and_grads(seed=0):
    torch.manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(4, 3))
    b = torch.nn.Parameter(torch.randn(3))
    w.grad, b.grad = torch.randn(4, 3), torch.randn(3)
    return [w, b]


@pytest.mark.parametrize("lr, risky", [(2e-5, False), (1.0, False), (1e30, False), (1e36, True), (1e38, True),
                                       (math.inf, True), (math.nan, True)])
def test_could_overflow_reads_the_bound_from_lr_and_dtype(lr, risky):
    # fp32 max 3.4e38: lr * 1e3 + 1e6 * |1 - lr * 0.01| reaches 1.7e38 at lr ~ 1.5e37
    assert could_overflow(adamw([{"params": model_and_grads(), "lr": lr}], 0.01)) is risky


@pytest.mark.parametrize("lr", [1e38, math.inf])
def test_a_step_that_overflows_the_weights_is_undone_bit_for_bit(lr):
    params = model_and_grads()
    opt = adamw([{"params": params, "lr": 1e-3}], 0.01)
    opt.step()  # one honest step first: there is optimizer state to keep
    before = [p.detach().clone() for p in params]
    state = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in params}
    for group in opt.param_groups:
        group["lr"] = lr
    assert step_keeping_finite(opt, params, Dist()) is False
    for p, was in zip(params, before):
        assert torch.equal(p, was)
        assert set(opt.state[p]) == set(state[id(p)])
        assert all(torch.equal(opt.state[p][k], v) for k, v in state[id(p)].items())
    assert float(opt.state[params[0]]["step"]) == 1.0  # the undone step is not counted


def test_a_first_step_that_overflows_leaves_no_optimizer_state():
    params = model_and_grads()
    before = [p.detach().clone() for p in params]
    opt = adamw([{"params": params, "lr": math.inf}], 0.0)
    assert step_keeping_finite(opt, params, Dist()) is False
    assert all(torch.equal(p, w) for p, w in zip(params, before)) and not opt.state


@pytest.mark.parametrize("lr", [1e-3, 1e36])  # 1e36: copied and checked, finite, kept
def test_an_honest_step_is_a_plain_adamw_step(lr):
    ours, plain = model_and_grads(), model_and_grads()
    a, b = adamw([{"params": ours, "lr": lr}], 0.0), adamw([{"params": plain, "lr": lr}], 0.0)
    assert step_keeping_finite(a, ours, Dist()) is True
    b.step()
    assert all(torch.equal(p, q) for p, q in zip(ours, plain))
    assert all(torch.isfinite(p).all() for p in ours)
