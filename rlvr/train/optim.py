"""The optimizer and learning-rate schedule both trainers use (rlvr train and rlvr sft)."""
from __future__ import annotations

import math

import torch


def adamw(groups: list[dict], weight_decay: float) -> torch.optim.AdamW:
    """AdamW over param groups, each a dict with its "params" and "lr" (GRPO adds a critic group with
    its own learning rate)."""
    return torch.optim.AdamW(groups, weight_decay=weight_decay, fused=True)  # fused: a 2-3x faster step


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
        state = {p: {k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
                 for p in params if p in optimizer.state}
        optimizer.step()
        finite = float(all(bool(torch.isfinite(p).all()) for p in params))
        if dd.allreduce_scalars({"f": finite}, dist, "min")["f"] == 1.0:
            return True
        for p, w in zip(params, weights):
            p.copy_(w)
            if p in state:
                optimizer.state[p] = state[p]
            else:
                optimizer.state.pop(p, None)
    return False
