"""The optimizer and learning-rate schedule both trainers use (rlvr train and rlvr sft).

optimizer.state picks where AdamW keeps its two moments (8 bytes a trained weight in fp32):

    fp32     torch's fused AdamW, state beside the weights
    8bit     torchao's AdamW8bit: both moments block-quantised to 8 bits (256 values a block, dynamic-tree
             codes, Dettmers et al. 2022), about 2 bytes a weight; tensors under 4096 values keep fp32 state
    offload  MasterAdamW on the host: fp32 master weights, gradients and moments in host memory, the step run
             there by the fused CPU AdamW; the accelerator holds only the weights and their gradients

Trained weights below fp32 (model.dtype bfloat16, or auto on CUDA, with full fine-tuning) are stepped through
fp32 master copies beside them (MasterAdamW on the weights' device, with either kind of moments): AdamW
straight on bf16 weights rounds away every update under half a bf16 ulp of the weight (lr 1e-6 on a weight
near 1, whose ulp is 2^-7), so such a model silently stops learning. fp32 weights (the CPU default, LoRA
adapters) need no copy and are stepped by the optimizer itself, as they always were.
"""
from __future__ import annotations

import io
import math
import types
from contextlib import nullcontext

import torch

from rlvr.errors import RlvrError

# The device path upcasts the bf16 gradients to fp32 this many values at a time and steps those weights,
# so the step holds one piece of fp32 gradient (256 MiB) rather than a copy of all of them.
STEP_CHUNK = 1 << 26


def adamw(groups: list[dict], weight_decay: float, state: str = "fp32") -> torch.optim.Optimizer:
    """AdamW over param groups, each a dict with its "params" and "lr" (GRPO adds a critic group with
    its own learning rate), its state as optimizer.state says (module docstring), through fp32 master
    copies where a trained weight is below fp32."""
    if state == "offload":
        return MasterAdamW(groups, weight_decay, host=True)
    if any(torch.finfo(p.dtype).bits < 32 for g in groups for p in g["params"]):
        return MasterAdamW(groups, weight_decay, moments=state)
    if state == "8bit":
        return _adamw_8bit(groups, weight_decay)
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


class MasterAdamW(torch.optim.Optimizer):
    """AdamW over fp32 master copies of the trained weights, kept on the weights' own device or (host=True,
    optimizer.state=offload) in host memory, pinned beside a CUDA model. step() upcasts each gradient to fp32
    beside its master (after the clip: the trainer clips the parameters' own gradients first), steps the masters
    with the inner optimizer (torch's fused AdamW, or with moments="8bit" torchao's AdamW8bit), and writes them
    back rounded to the parameters' dtype. param_groups are the parameters' (the trainer clips them, the
    schedule sets their lr), mirrored into the inner optimizer's groups at each step. The masters are each
    parameter's state (from the first step on), saved and loaded with the moments, so a resume continues from
    the fp32 values and not from their bf16 rounding. Over fp32 parameters the step is fused AdamW's to the last
    bit (tests/train/test_optim.py)."""

    def __init__(self, groups: list[dict], weight_decay: float, host: bool = False, moments: str = "fp32"):
        super().__init__(groups, {"weight_decay": weight_decay})
        self.on_host = host
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        inner_groups = []
        with torch.no_grad():
            for group in self.param_groups:
                masters = []
                for p in group["params"]:
                    if host:
                        pin = p.device.type == "cuda"  # page-locked: copies overlap and run at full bus speed
                        m = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
                        m.copy_(p.detach())
                        m.grad = torch.zeros(p.shape, dtype=torch.float32, pin_memory=pin)  # kept: pinned once
                    else:
                        m = p.detach().to(torch.float32, copy=True)
                    masters.append(m)
                    self.pairs.append((p, m))
                inner_groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": masters})
        self.inner = _adamw_8bit(inner_groups, weight_decay) if moments == "8bit" else \
            torch.optim.AdamW(inner_groups, fused=True)
        # the host's gradients are all copied before one step; on the device a piece at a time (STEP_CHUNK)
        self.chunks, size = [[]], 0
        for pair in self.pairs:
            if self.chunks[-1] and not host and size + pair[0].numel() > STEP_CHUNK:
                self.chunks.append([])
                size = 0
            self.chunks[-1].append(pair)
            size += pair[0].numel()

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self._mirror_groups()
        cuda = any(p.is_cuda for p, _ in self.pairs)
        if not self.state:  # the first step: the weights may have been loaded since (a resume builds this first)
            for p, m in self.pairs:
                m.copy_(p.detach())
        for chunk in self.chunks:
            for p, m in chunk:
                if not self.on_host:
                    m.grad = None if p.grad is None else p.grad.to(torch.float32)
                elif p.grad is None:
                    m.grad = None
                else:
                    if m.grad is None:
                        m.grad = torch.zeros(m.shape, dtype=torch.float32, pin_memory=cuda)
                    m.grad.copy_(p.grad, non_blocking=True)
            if self.on_host and cuda:
                torch.cuda.synchronize()  # the gradients have landed in host memory
            self.inner.step()
            for p, m in chunk:
                if p.grad is not None:
                    p.copy_(m, non_blocking=True)
                if not self.on_host:
                    m.grad = None
        self._hold_masters()
        return loss

    def _mirror_groups(self) -> None:
        """The parameters' groups' hyperparameters (the lr the schedule set) into the inner optimizer's; where
        that holds one as a tensor (torchao's AdamW8bit: its compiled step reads lr as a tensor), in place."""
        for group, inner_group in zip(self.param_groups, self.inner.param_groups):
            for k, v in group.items():
                if k == "params":
                    continue
                if isinstance(inner_group.get(k), torch.Tensor):
                    inner_group[k].fill_(v)
                else:
                    inner_group[k] = v

    def _hold_masters(self) -> None:
        """Each parameter's state is its master, from the first step (or load) on, as torch's optimizers make
        their state at the first step: torch.distributed.checkpoint reads an empty state as not yet made and
        makes it by a step with zero gradients and lr 0 before it loads one (the masters stay as they are)."""
        for p, m in self.pairs:
            self.state[p] = {"master": m}

    def state_dict(self) -> dict:
        """The inner optimizer's state dict, each parameter's entry with its fp32 master added (none before the
        first step: the masters are the weights then), its groups' lr the one the schedule set for the next step."""
        self._mirror_groups()
        inner = self.inner.state_dict()
        state = {i: {**inner["state"].get(i, {}), "master": m} for i, (_, m) in enumerate(self.pairs)} \
            if self.state else {}
        return {"state": state, "param_groups": inner["param_groups"]}

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict) -> None:
        """Moments and masters as saved (keyed by index or, from torch.distributed.checkpoint, by name, in the
        groups' order); a state saved without masters takes them from the parameters (loaded by then). The
        groups' hyperparameters (the scheduled lr) come back on the parameters' groups too."""
        keys = [k for g in state_dict["param_groups"] for k in g["params"]]
        if len(keys) != len(self.pairs):
            raise ValueError(f"the saved optimizer state has {len(keys)} parameters, this optimizer {len(self.pairs)}")
        inner_state = {}
        for key, (p, m) in zip(keys, self.pairs):
            entry = dict(state_dict["state"].get(key, {}))
            master = entry.pop("master", None)
            m.copy_(master if master is not None else p.detach())
            if entry:
                inner_state[key] = entry
        self.inner.load_state_dict({"state": inner_state, "param_groups": state_dict["param_groups"]})
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update({k: v.item() if isinstance(v, torch.Tensor) else v for k, v in saved.items()
                          if k != "params" and k in group})
        self.state.clear()
        if state_dict["state"]:
            self._hold_masters()


def warmup_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up: step s (0-based) runs at min(1, (s + 1) / warmup_steps) of each group's lr; then
    constant. warmup_steps 0: the full lr from the first step."""
    def factor(s: int) -> float:  # a plain function: LambdaLR's state_dict leaves it out
        return min(1.0, (s + 1) / warmup_steps) if warmup_steps > 0 else 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def current_lr(scheduler: torch.optim.lr_scheduler.LRScheduler) -> float:
    """The first group's learning rate for the next step, as a float: torchao's AdamW8bit holds each group's
    lr as a tensor (its compiled step reads it so), which the schedule hands back as it is and no metrics
    line can hold."""
    return float(scheduler.get_last_lr()[0])


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


def _copy_state(optimizer: torch.optim.Optimizer) -> dict:
    """A copy of the optimizer's state dict (any optimizer.state kind; MasterAdamW's masters too), made the way
    a checkpoint makes one: torchao's 8-bit moments are a tensor subclass that has no clone, so deepcopy cannot
    copy them, but they serialise."""
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


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
        state = _copy_state(optimizer)
        optimizer.step()
        finite = float(all(bool(torch.isfinite(p).all()) for p in params))
        if dd.allreduce_scalars({"f": finite}, dist, "min")["f"] == 1.0:
            return True
        for p, w in zip(params, weights):
            p.copy_(w)
        optimizer.load_state_dict(state)  # MasterAdamW: its masters as they were
    return False
