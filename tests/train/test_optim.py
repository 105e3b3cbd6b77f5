"""optimizer.state (rlvr/train/optim.py): 8-bit moments and host offload against torch's fused AdamW, each
over a few real updates (policy_update on tiny-random, every weight trained, the gradient clip active); and
the step kept only when the weights it makes are finite: an lr of 1e38 or inf with a finite gradient is
undone (weights and optimizer state bit for bit as before), an ordinary lr steps as a plain AdamW step."""
import copy
import math

import pytest
import torch

from rlvr.config import Config, OptimizerConfig, build_config

from rlvr.train.settings import update_settings
from rlvr.errors import RlvrError
from rlvr.models import tiny_random
from rlvr.train.distributed import Dist
from rlvr.train.optim import (MasterAdamW, adamw, could_overflow, current_lr, step_keeping_finite,
                              warmup_scheduler)
from rlvr.train.update import policy_update
from tests.train.test_lora import rollout_batch

STEPS, LR = 3, 1e-2


def train(state, steps: int = STEPS):
    """(initial weights, weights after `steps` updates, optimizer) of tiny-random with optimizer.state `state`
    (or an optimizer made from the param groups by `state`)."""
    model, tok = tiny_random()
    batch = rollout_batch(model, tok)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": params, "lr": LR}]
    opt = adamw(groups, 0.01, state) if isinstance(state, str) else state(groups)
    sched = warmup_scheduler(opt, 2)
    cfg = Config(optimizer=OptimizerConfig(micro_batch_prompts=2, max_grad_norm=0.5))  # the clip acts (norms ~1-3)
    s = update_settings(cfg, tok.pad_token_id, "no")
    norms = []
    for _ in range(steps):
        norms.append(policy_update(model, opt, batch, s)["grad_norm"])
        sched.step()
    assert min(norms) > 0.5, norms
    return initial, {n: p.detach().clone() for n, p in model.named_parameters()}, opt


def test_offload_is_adamw_to_the_last_bit():
    initial, fp32, _ = train("fp32")
    _, offload, opt = train("offload")
    assert isinstance(opt, MasterAdamW) and opt.on_host
    for n in fp32:
        assert not torch.equal(fp32[n], initial[n]) or n.endswith("norm.weight"), n
        assert torch.equal(offload[n], fp32[n]), n
    # its moments live in the inner optimizer, over the masters; each parameter's own state is its master
    assert len(opt.inner.state) == len(fp32) and all(set(s) == {"master"} for s in opt.state.values())


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
    assert all(torch.equal(m, was) for (_, m), (_, was) in zip(again.pairs, opt.pairs))  # the saved masters
    assert torch.equal(next(iter(again.inner.state.values()))["exp_avg"], next(iter(opt.inner.state.values()))["exp_avg"])


def test_a_state_not_offered_is_refused():
    with pytest.raises(RlvrError, match="optimizer.state"):
        build_config(None, ["--optimizer.state=4bit"])


def test_the_setting_reaches_the_runs_optimizer():
    from rlvr.train.assemble import _optimizer

    for state, kind in (("offload", "MasterAdamW"), ("8bit", "AdamW8bit"), ("fp32", "AdamW")):
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


@pytest.mark.parametrize("lr", [1e38, math.inf])
def test_an_overflowing_step_with_8bit_moments_is_undone_bit_for_bit(lr):
    """8192 values: above torchao's 4096, so both moments are block-quantised tensors, which have no clone.
    A constant gradient -1 makes each step add lr to every weight (m/sqrt(v) = -1 after bias correction), so
    weights from 2e38 to 3e38 pass fp32's largest value (3.4e38) at lr 1e38 and at an infinite lr."""
    p = torch.nn.Parameter(torch.linspace(2e38, 3e38, 8192).reshape(64, 128))
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0, "8bit")
    p.grad = -torch.ones(64, 128)
    opt.step()
    before = p.detach().clone()
    moments = {k: v.dequantize() for k, v in opt.state[p].items() if k.startswith("exp_avg")}
    assert {type(v).__name__ for v in opt.state[p].values()} >= {"OptimState8bit"}
    for group in opt.param_groups:
        group["lr"].fill_(lr)  # torchao holds the lr as a tensor, as the schedule sets it
    assert step_keeping_finite(opt, [p], Dist()) is False
    assert torch.equal(p, before)
    assert all(torch.equal(opt.state[p][k].dequantize(), v) for k, v in moments.items())
    assert float(opt.state[p]["step"]) == 1.0


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


# ------------------------------------------------------------------ bf16 weights through fp32 master copies


def test_bf16_weights_get_fp32_masters_and_fp32_weights_do_not():
    fp32, bf16 = tiny_random()[0], tiny_random()[0].to(torch.bfloat16)
    assert type(adamw([{"params": list(fp32.parameters()), "lr": LR}], 0.0)) is torch.optim.AdamW
    opt = adamw([{"params": list(bf16.parameters()), "lr": LR}], 0.0)
    assert isinstance(opt, MasterAdamW) and not opt.on_host and type(opt.inner) is torch.optim.AdamW
    assert all(m.dtype == torch.float32 and torch.equal(m, p.float()) for p, m in opt.pairs)
    eight = adamw([{"params": list(bf16.parameters()), "lr": LR}], 0.0, "8bit")
    assert isinstance(eight, MasterAdamW) and type(eight.inner).__name__ == "AdamW8bit"


def one_weight(w: float = 1.0):
    p = torch.nn.Parameter(torch.tensor([w], dtype=torch.bfloat16))
    p.grad = torch.ones_like(p)
    return p


def test_a_small_update_is_rounded_away_in_bf16_and_kept_by_the_master():
    """A constant gradient 1 gives AdamW's bias-corrected m/sqrt(v) = 1 at every step, so each step moves
    the weight by lr (1e-3). Below 1.0 bf16's spacing is 2^-8 = 0.00390625: 1 - 0.001 is nearer 1.0 than
    0.99609375, so AdamW straight on the bf16 weight rounds every step back to 1.0. The fp32 master is
    1 - 0.001k after k steps, and the weight is its bf16 rounding: 0.998 is below the midpoint 0.998046875
    of 0.99609375 and 1, so the weight moves at k=2; 0.994 is below 0.994140625 (the midpoint down to
    0.9921875), so it moves again at k=6."""
    plain = one_weight()
    bare = torch.optim.AdamW([plain], lr=1e-3, weight_decay=0.0, fused=True)
    for _ in range(50):
        bare.step()
    assert float(plain.detach()) == 1.0

    p = one_weight()
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0)
    seen, masters = [], []
    for _ in range(6):
        opt.step()
        seen.append(float(p.detach()))
        masters.append(float(opt.state[p]["master"]))
    assert seen == [1.0, 0.99609375, 0.99609375, 0.99609375, 0.99609375, 0.9921875]
    assert masters == pytest.approx([1 - 1e-3 * k for k in range(1, 7)], abs=1e-6)
    assert p.dtype == torch.bfloat16 and opt.state[p]["master"].dtype == torch.float32


def test_the_master_path_over_fp32_weights_is_fused_adamw_to_the_last_bit():
    """MasterAdamW on the device, over fp32 weights (a PPO critic beside a bf16 policy gets this), steps as the
    fused AdamW it wraps: the policy_update trajectory of test_offload_is_adamw_to_the_last_bit."""
    initial, fp32, _ = train("fp32")
    _, ours, opt = train(lambda groups: MasterAdamW(groups, 0.01))
    assert isinstance(opt, MasterAdamW) and not opt.on_host
    for n in fp32:
        assert torch.equal(ours[n], fp32[n]), n


def test_the_device_path_steps_in_pieces_as_in_one(monkeypatch):
    """STEP_CHUNK bounds the fp32 gradient held at once; stepping a piece at a time is the same step."""
    import rlvr.train.optim as optim

    _, whole, _ = train(lambda groups: MasterAdamW(groups, 0.01))
    monkeypatch.setattr(optim, "STEP_CHUNK", 5000)
    _, pieces, opt = train(lambda groups: MasterAdamW(groups, 0.01))
    assert len(opt.chunks) > 3
    assert all(torch.equal(pieces[n], whole[n]) for n in whole)


def test_bf16_masters_resume_exactly_from_the_state_dict():
    """The masters are saved with the moments: a new optimizer loaded from the state dict steps on from the
    fp32 values, not from the bf16 weights' rounding of them (which differ after small updates)."""
    p = one_weight()
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0)
    for _ in range(3):
        opt.step()
    state = copy.deepcopy(opt.state_dict())
    master = state["state"][0]["master"]
    assert master.dtype == torch.float32 and float(master) != float(p.detach())
    q = torch.nn.Parameter(p.detach().clone())
    q.grad = torch.ones_like(q)
    again = adamw([{"params": [q], "lr": 1e-3}], 0.0)
    again.load_state_dict(state)
    for _ in range(2):
        opt.step()
        again.step()
    assert torch.equal(again.state[q]["master"], opt.state[p]["master"]) and torch.equal(q, p)
    # the master at 0.995 rounds to 0.99609375; a resume from the weight (0.99609375 after 3 steps) would be at
    # 0.99409375 now, below the midpoint 0.994140625: 0.9921875
    assert float(q.detach()) == 0.99609375


@pytest.mark.parametrize("lr", [1e38, math.inf])
def test_a_bf16_step_that_overflows_is_undone_with_its_masters(lr):
    p = one_weight(-3e38)  # bf16's largest is 3.39e38: a step of 1e38 further down overflows
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0)
    for _ in range(3):
        opt.step()
    before, master = p.detach().clone(), opt.state[p]["master"].clone()
    for group in opt.param_groups:
        group["lr"] = lr
    assert step_keeping_finite(opt, [p], Dist()) is False
    assert torch.equal(p, before) and torch.equal(opt.state[p]["master"], master)
    assert float(opt.state_dict()["state"][0]["step"]) == 3.0


def test_bf16_full_fine_tuning_follows_the_fp32_path():
    """One policy_update of tiny-random with bf16 weights (its fp32 weights rounded) against the fp32 model:
    the gradient norm within 1% (measured 0.3%), each tensor's gradient within 3% in norm (measured at most
    1.3%), each tensor's update (its fp32 master's move) pointing as fp32 AdamW's does, cosine >= 0.95
    (measured >= 0.969; AdamW's first step is about lr * sign(g), and entries with g near 0 flip with bf16's
    rounding), and the weights after it within 1% in norm (measured 0.75%)."""
    model, tok = tiny_random()
    a, b = one_update(model, tok, 1e-3), one_update(model.to(torch.bfloat16), tok, 1e-3)
    assert isinstance(b["opt"], MasterAdamW) and not isinstance(a["opt"], MasterAdamW)
    close_updates(a, b, grad_norm=0.01, grad=0.03, cos=0.95, weights=0.01)


@pytest.mark.slow
def test_bf16_full_fine_tuning_follows_the_fp32_path_on_smollm2():
    """The same on SmolLM2-135M, one step at lr 1e-5: the gradient norm within 2% (measured 0.5%), the update
    cosine >= 0.9 for each tensor (measured >= 0.95), the weights after it within 0.5% (measured 0.14%). Per
    tensor gradients are not compared here: a norm weight's gradient, a sum over every token of small
    products, is within 18% (measured) of fp32's in bf16, while the whole gradient is within 2%."""
    from rlvr.models import load_model

    model, tok = load_model("smollm2-135m-instruct", "float32", "cpu")
    a, b = one_update(model, tok, 1e-5), one_update(model.to(torch.bfloat16), tok, 1e-5)
    close_updates(a, b, grad_norm=0.02, grad=None, cos=0.9, weights=0.005)


BATCHES = {}


def one_update(model, tok, lr: float) -> dict:
    """One policy_update on a copy of `model` (the gradients recorded at the step, the weights before and after
    as the optimizer holds them: the masters where it has them)."""
    model = copy.deepcopy(model)
    if id(tok) not in BATCHES:  # sampled once, from the first (fp32) model: both train on the same batch
        BATCHES[id(tok)] = rollout_batch(model, tok)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw([{"params": params, "lr": lr}], 0.0)
    grads, step = {}, opt.step

    def recording(closure=None):
        grads.update({n: p.grad.float().clone() for n, p in model.named_parameters()})
        return step(closure)

    opt.step = recording
    masters = dict(opt.pairs) if isinstance(opt, MasterAdamW) else {}
    held = lambda: {n: masters.get(p, p).detach().float().clone() for n, p in model.named_parameters()}
    before = held()
    cfg = Config(optimizer=OptimizerConfig(micro_batch_prompts=2, max_grad_norm=1.0))
    metrics = policy_update(model, opt, BATCHES[id(tok)], update_settings(cfg, tok.pad_token_id, "no"))
    return {"opt": opt, "metrics": metrics, "grads": grads, "before": before, "after": held()}


def close_updates(a: dict, b: dict, grad_norm: float, grad: float | None, cos: float, weights: float) -> None:
    ga, gb = a["metrics"]["grad_norm"], b["metrics"]["grad_norm"]
    assert abs(gb - ga) <= grad_norm * ga, (ga, gb)
    for n, g in a["grads"].items():
        if grad is not None:
            assert (b["grads"][n] - g).norm() <= grad * g.norm(), n
        da, db = a["after"][n] - a["before"][n], b["after"][n] - b["before"][n]
        assert torch.nn.functional.cosine_similarity(da.flatten(), db.flatten(), 0) >= cos, n
        assert (b["after"][n] - a["after"][n]).norm() <= weights * a["after"][n].norm(), n


@pytest.mark.parametrize("state", ["offload", "bf16"])
def test_the_saved_lr_is_the_one_the_schedule_set_for_the_next_step(state):
    """The schedule sets the parameters' groups after a step; the inner optimizer sees them at its next step,
    so a state saved in between carries the groups' lr, and a load puts it back on the parameters' groups."""
    p = one_weight() if state == "bf16" else torch.nn.Parameter(torch.ones(1))
    p.grad = torch.ones_like(p)
    kind = "fp32" if state == "bf16" else state  # optimizer.state; bf16 weights bring the masters themselves
    opt = adamw([{"params": [p], "lr": 3e-3}], 0.0, kind)
    sched = warmup_scheduler(opt, 3)
    opt.step()
    sched.step()  # step 2 of the warm-up: 2/3 of the lr
    saved = copy.deepcopy(opt.state_dict())
    assert saved["param_groups"][0]["lr"] == pytest.approx(2e-3)
    again = adamw([{"params": [torch.nn.Parameter(p.detach().clone())], "lr": 3e-3}], 0.0, kind)
    warmup_scheduler(again, 3)  # a resume builds the schedule too: the groups at step 1's lr
    again.load_state_dict(saved)
    assert again.param_groups[0]["lr"] == pytest.approx(2e-3)


def test_8bit_moments_step_bf16_weights_through_masters_too():
    """torchao's AdamW8bit over the fp32 masters (4096 values: block-quantised moments). A constant gradient
    makes constant moments, which the block codes hold exactly (each block's absmax is the value), so the
    weights take the hand-computed path of test_a_small_update_is_rounded_away_in_bf16_and_kept_by_the_master.
    The lr the schedule sets reaches torchao's tensor lr in place, and the state dict, masters and all, loads
    into a new optimizer that steps on alike."""
    p = torch.nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
    p.grad = torch.ones_like(p)
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0, "8bit")
    sched = warmup_scheduler(opt, 0)
    seen = []
    for _ in range(6):
        opt.step()
        sched.step()
        seen.append(sorted(set(p.detach().float().tolist())))
    assert seen == [[1.0], [0.99609375], [0.99609375], [0.99609375], [0.99609375], [0.9921875]]
    assert type(opt.inner.state[opt.pairs[0][1]]["exp_avg"]).__name__ == "OptimState8bit"
    q = torch.nn.Parameter(p.detach().clone())
    q.grad = torch.ones_like(q)
    again = adamw([{"params": [q], "lr": 1e-3}], 0.0, "8bit")
    again.load_state_dict(opt.state_dict())
    opt.step()
    again.step()
    assert torch.equal(again.state[q]["master"], opt.state[p]["master"])
    assert float(opt.state[p]["master"][0]) == pytest.approx(1 - 7e-3, abs=1e-6)


@pytest.mark.parametrize("state", ["fp32", "8bit", "offload"])
def test_the_logged_lr_is_a_float_for_every_state(state):
    # torchao's AdamW8bit keeps each group's lr as a tensor, and the schedule handed it back so: the first
    # metrics line of a run with optimizer.state=8bit could not be written (TypeError, not JSON serializable)
    p = torch.nn.Parameter(torch.zeros(4096))
    opt = adamw([{"params": [p], "lr": 1e-3}], 0.0, state)
    sched = warmup_scheduler(opt, 4)
    seen = []
    for _ in range(5):
        seen.append(current_lr(sched))
        p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
    assert all(type(x) is float for x in seen)
    assert seen == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3], rel=1e-6)  # (s + 1) / 4 of the lr, then all


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_run_with_8bit_state_writes_its_metrics(tmp_path, command):
    import json
    from pathlib import Path

    from rlvr.cli import main

    smoke = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
    out = tmp_path / "run"
    assert main([command, smoke, "--optimizer.state=8bit", "--train.steps=2", f"--train.out={out}"]) == 0
    lrs = [json.loads(line)["lr"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([2e-5 / 3, 2e-5 * 2 / 3], rel=1e-6)  # optimizer.lr 2e-5, 3 warm-up steps
