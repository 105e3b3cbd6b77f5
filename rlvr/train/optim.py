"""The optimizer and learning-rate schedule both trainers use (rlvr train and rlvr sft).

optimizer.state picks where AdamW keeps its two moments (8 bytes a trained weight in fp32):

    fp32     torch's fused AdamW, state beside the weights
    8bit     torchao's AdamW8bit: both moments block-quantised to 8 bits (256 values a block, dynamic-tree
             codes, Dettmers et al. 2022), about 2 bytes a weight; tensors under 4096 values keep fp32 state
    offload  HostAdamW: fp32 master weights, gradients and moments in host memory, the step run there by the
             fused CPU AdamW; the accelerator holds only the weights and their gradients
"""
from __future__ import annotations

import copy
import math
import types
from contextlib import nullcontext

import torch

from rlvr.errors import RlvrError



def adamw(groups: list[dict], weight_decay: float, state: str = "fp32") -> torch.optim.Optimizer:
    """AdamW over param groups, each a dict with its "params" and "lr" (GRPO adds a critic group with
    its own learning rate), its state as optimizer.state says (module docstring)."""
    if state == "8bit":
        return _adamw_8bit(groups, weight_decay)
    if state == "offload":
        return HostAdamW(groups, weight_decay)
    return torch.optim.AdamW(groups, weight_decay=weight_decay, fused=True)  # fused: a 2-3x faster step


def _adamw_8bit(groups: list[dict], weight_decay: float) -> torch.optim.Optimizer:
    try:
        from torchao.optim import AdamW8bit
    except ImportError as e:
        raise RlvrError("optimizer.state=8bit needs torchao: pip install --no-deps torchao==0.18.0") from e
    optimizer = AdamW8bit(groups, weight_decay=weight_decay)
    compiled = optimizer.step

    def step(self, closure=None):
        # torchao compiles each tensor shape's step; on a CPU that is minutes of C++ builds for a few
        # seconds of work, so it runs eagerly there (the same arithmetic, measured equal to the last bit)
        on_cpu = all(p.device.type == "cpu" for g in self.param_groups for p in g["params"])
        with torch.compiler.set_stance("force_eager") if on_cpu else nullcontext():
            return compiled(closure)

    optimizer.step = types.MethodType(step, optimizer)  # a method: the lr schedule wraps it as one
    return optimizer


class HostAdamW(torch.optim.Optimizer):
    """AdamW whose fp32 master weights, gradients and moments live in host memory (optimizer.state=offload):
    16 bytes a trained weight off the accelerator. step() copies each gradient to the host (after the
    clip: the trainer clips the device gradients first), runs torch's fused CPU AdamW there, and copies the
    weights back in the parameters' own dtype. param_groups are the device parameters' (the trainer clips
    them, the schedule sets their lr), mirrored into the host optimizer's groups at each step. On a CPU the
    host copy is a second fp32 copy and the step is AdamW's to the last bit (tests/train/test_optim.py)."""

    def __init__(self, groups: list[dict], weight_decay: float):
        super().__init__(groups, {"weight_decay": weight_decay})
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        host_groups = []
        for group in self.param_groups:
            hosts = []
            for p in group["params"]:
                pin = p.device.type == "cuda"  # page-locked: copies overlap and run at full bus speed
                h = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
                h.copy_(p.detach())
                h.grad = torch.zeros(p.shape, dtype=torch.float32, pin_memory=pin)
                hosts.append(h)
                self.pairs.append((p, h))
            host_groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": hosts})
        self.host = torch.optim.AdamW(host_groups, fused=True)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, host_group in zip(self.param_groups, self.host.param_groups):
            host_group.update({k: v for k, v in group.items() if k != "params"})
        for p, h in self.pairs:
            if p.grad is None:
                h.grad = None
            else:
                if h.grad is None:
                    h.grad = torch.zeros_like(h)
                h.grad.copy_(p.grad, non_blocking=True)
        if any(p.is_cuda for p, _ in self.pairs):
            torch.cuda.synchronize()  # the gradients have landed in host memory
        self.host.step()
        for p, h in self.pairs:
            p.copy_(h, non_blocking=True)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _ in self.pairs:
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad.zero_()

    def state_dict(self) -> dict:
        return self.host.state_dict()

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict) -> None:
        """The host optimizer's moments; the master weights are taken again from the parameters (a resume
        has loaded the policy's weights by then)."""
        self.host.load_state_dict(state_dict)
        for p, h in self.pairs:
            h.copy_(p.detach())


def warmup_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up: step s (0-based) runs at min(1, (s + 1) / warmup_steps) of each group's lr; then
    constant. warmup_steps 0: the full lr from the first step."""
    def factor(s: int) -> float:  # a plain function: LambdaLR's state_dict leaves it out
        return min(1.0, (s + 1) / warmup_steps) if warmup_steps > 0 else 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# An AdamW step moves a weight by lr times m/(sqrt(v) + eps), which is at most about (1 - b1)/sqrt(1 - b2)
# (3.2 with the default betas; UPDATE_BOUND leaves room), and scales it by (1 - lr * weight_decay). With
# weights below WEIGHT_BOUND (trained weights are far below), a step can overflow only when the bound
# computed from these reaches the dtype's largest value: only then is the state copied to undo it.
UPDATE_BOUND = 1e3
WEIGHT_BOUND = 1e6


def could_overflow(optimizer: torch.optim.Optimizer) -> bool:
    for group in optimizer.param_groups:
        lr, wd = float(group["lr"]), float(group.get("weight_decay", 0.0))
        for p in group["params"]:
            top = torch.finfo(p.dtype).max if p.dtype.is_floating_point else math.inf
            bound = lr * UPDATE_BOUND + WEIGHT_BOUND * abs(1 - lr * wd)
            if not math.isfinite(bound) or bound >= top / 2:
                return True
    return False


def step_keeping_finite(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], dist) -> bool:
    """optimizer.step(), undone when it made a weight non-finite though the gradient was finite (an lr
    of 1e38 or inf): the weights and the optimizer state are put back as they were, so the step is
    skipped as a non-finite gradient's is, and no checkpoint holds such weights. Returns whether the
    step was kept. A step that cannot overflow (could_overflow) is taken as it is, with no copy and no
    check: an ordinary lr costs nothing. Under torchrun every rank decides alike (dist: rlvr Dist)."""
    from rlvr.train import distributed as dd

    if not could_overflow(optimizer):
        optimizer.step()
        return True
    with torch.no_grad():
        weights = [p.detach().clone() for p in params]
        state = copy.deepcopy(optimizer.state_dict())  # any optimizer.state kind (HostAdamW: its host one)
        optimizer.step()
        finite = float(all(bool(torch.isfinite(p).all()) for p in params))
        if dd.allreduce_scalars({"f": finite}, dist, "min")["f"] == 1.0:
            return True
        for p, w in zip(params, weights):
            p.copy_(w)
        optimizer.load_state_dict(state)  # after the weights: HostAdamW takes its master copy from them
    return False
