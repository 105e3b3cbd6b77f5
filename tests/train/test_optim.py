"""optimizer.state (rlvr/train/optim.py): 8-bit moments and host offload against torch's fused AdamW, each
over a few real updates (policy_update on tiny-random, every weight trained, the gradient clip active); and
the step kept only when the weights it makes are finite: an lr of 1e38 or inf with a finite gradient is
undone (weights and optimizer state bit for bit as before), an ordinary lr steps as a plain AdamW step."""
import math

import pytest
import torch

from rlvr.config import Config, OptimizerConfig, build_config
from rlvr.errors import RlvrError
from rlvr.models import tiny_random
from rlvr.train.distributed import Dist
from rlvr.train.optim import HostAdamW, adamw, could_overflow, step_keeping_finite, warmup_scheduler
from rlvr.train.update import UpdateSettings, policy_update
from tests.train.test_lora import rollout_batch

STEPS, LR = 3, 1e-2


def train(state: str, steps: int = STEPS):
    """(initial weights, weights after `steps` updates, optimizer) of tiny-random with optimizer.state `state`."""
    model, tok = tiny_random()
    batch = rollout_batch(model, tok)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw([{"params": params, "lr": LR}], 0.01, state)
    sched = warmup_scheduler(opt, 2)
    cfg = Config(optimizer=OptimizerConfig(micro_batch_prompts=2, max_grad_norm=0.5))  # the clip acts (norms ~1-3)
    s = UpdateSettings.of(cfg, tok.pad_token_id, "no")
    norms = []
    for _ in range(steps):
        norms.append(policy_update(model, opt, batch, s)["grad_norm"])
        sched.step()
    assert min(norms) > 0.5, norms
    return initial, {n: p.detach().clone() for n, p in model.named_parameters()}, opt


def test_offload_is_adamw_to_the_last_bit():
    initial, fp32, _ = train("fp32")
    _, offload, opt = train("offload")
    assert isinstance(opt, HostAdamW)
    for n in fp32:
        assert not torch.equal(fp32[n], initial[n]) or n.endswith("norm.weight"), n
        assert torch.equal(offload[n], fp32[n]), n
    # its moments live in the host optimizer, the device side holds none
    assert len(opt.state) == 0 and len(opt.host.state) == len(fp32)


def test_8bit_state_follows_adamw_within_5_percent_of_its_movement():
    """Over 3 steps each tensor's movement under 8-bit moments (256-value blocks, dynamic-tree codes) is within
    5% of fp32 AdamW's, in norm: ||d8 - d32|| <= 0.05 ||d32|| (measured: at most 2.8%, the embedding, whose
    unseen tokens' rows have second moments near zero, where the codes are coarsest; 0.2-1.4% elsewhere;
    tensors under 4096 values keep fp32 moments and differ only as the trajectories do)."""
    initial, fp32, _ = train("fp32")
    _, eight, opt = train("8bit")
    for n in fp32:
        d32, d8 = fp32[n] - initial[n], eight[n] - initial[n]
        assert (d8 - d32).norm() <= 0.05 * d32.norm(), n
    quantised = {n for n, p in tiny_random()[0].named_parameters() if p.numel() >= 4096}
    assert "model.embed_tokens.weight" in quantised and "model.norm.weight" not in quantised
    states = {type(s["exp_avg"]).__name__ for s in opt.state.values()}
    assert states == {"OptimState8bit", "Tensor"}
    code_bytes = sum(s["exp_avg"].codes.numel() for s in opt.state.values() if type(s["exp_avg"]).__name__ != "Tensor")
    assert code_bytes == sum(p.numel() for p in opt.state if p.numel() >= 4096)  # one byte a value
    assert any((eight[n] != fp32[n]).any() for n in quantised)  # really 8-bit: not fp32 in disguise


def test_offload_resumes_from_its_state_dict():
    _, _, opt = train("offload")
    state = opt.state_dict()
    model, tok = tiny_random()
    again = adamw([{"params": [p for p in model.parameters()], "lr": LR}], 0.01, "offload")
    again.load_state_dict(state)
    assert all(torch.equal(h, p) for p, h in again.pairs)  # masters taken from the loaded weights
    assert torch.equal(next(iter(again.host.state.values()))["exp_avg"], next(iter(opt.host.state.values()))["exp_avg"])


def test_a_state_not_offered_is_refused():
    with pytest.raises(RlvrError, match="optimizer.state"):
        build_config(None, ["--optimizer.state=4bit"])


def test_the_setting_reaches_the_runs_optimizer():
    from rlvr.train.assemble import _optimizer

    for state, kind in (("offload", "HostAdamW"), ("8bit", "AdamW8bit"), ("fp32", "AdamW")):
        opt, _, _ = _optimizer(build_config(None, [f"--optimizer.state={state}"]), tiny_random()[0])
        assert type(opt).__name__ == kind


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


@pytest.mark.parametrize("state", ["fp32", "offload"])
@pytest.mark.parametrize("lr", [1e38, math.inf])
def test_a_step_that_overflows_the_weights_is_undone_bit_for_bit(lr, state):
    params = model_and_grads()
    opt = adamw([{"params": params, "lr": 1e-3}], 0.01, state)
    opt.step()  # one honest step first: there is optimizer state to keep
    before = [p.detach().clone() for p in params]
    saved = opt.state_dict()["state"]
    saved = {i: {k: v.clone() for k, v in s.items()} for i, s in saved.items()}
    for group in opt.param_groups:
        group["lr"] = lr
    assert step_keeping_finite(opt, params, Dist()) is False
    assert all(torch.equal(p, was) for p, was in zip(params, before))
    now = opt.state_dict()["state"]
    assert set(now) == set(saved) and all(torch.equal(now[i][k], v) for i in saved for k, v in saved[i].items())
    assert float(now[0]["step"]) == 1.0  # the undone step is not counted
    for group in opt.param_groups:  # and the next honest step is AdamW's second step from those weights
        group["lr"] = 1e-3
    params[0].grad, params[1].grad = torch.ones(4, 3), torch.ones(3)
    assert step_keeping_finite(opt, params, Dist()) is True and float(opt.state_dict()["state"][0]["step"]) == 2.0
    assert all(torch.isfinite(p).all() and not torch.equal(p, was) for p, was in zip(params, before))


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
