"""Where a run computes: `train.device` resolved once into a torch.device, and the precision that goes with it.

    resolve_device("auto")          cuda:0 when torch sees a GPU, else cpu
    resolve_device("cuda", 3)       cuda:3 (torchrun: one GPU per local rank)
    resolve_precision("auto", dev)  "bf16" on CUDA, "no" on the CPU

Everything that holds tensors takes the device from here (the policy, the reference, the critic, rollout
copies, evaluation, `rlvr sft`, `rlvr eval`); Python lists stay on the host, and a training batch crosses
to the device at one place (rlvr.rollout.decoding.Rollout.to, called by the loop's make_batch).
"""
from __future__ import annotations

import os
import re

import torch

from rlvr.errors import RlvrError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_SPEC = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def check_device_spec(spec: str) -> str | None:
    """None when `spec` is a valid train.device, else what is wrong with it."""
    m = _SPEC.match(spec)
    if not m or (m[2] is not None and m[1] != "cuda"):
        return f"train.device '{spec}' is not one of {DEVICE_CHOICES}"
    return None


def resolve_device(spec: str, local_rank: int | None = None) -> torch.device:
    """train.device -> a torch.device. `local_rank` (under torchrun) picks each process's own GPU for
    auto and cuda; an explicit cuda:N there would put every rank on one GPU, so it is refused."""
    problem = check_device_spec(spec)
    if problem:
        raise RlvrError(problem)
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RlvrError(f"train.device={spec} but torch sees no CUDA GPU (torch {torch.__version__}, "
                        f"cuda build: {torch.version.cuda or 'none'}); use train.device=cpu or auto")
    if spec.startswith("cuda:"):
        if local_rank is not None:
            raise RlvrError(f"train.device={spec} under torchrun would put every process on one GPU; use "
                            "train.device=cuda (each process takes the GPU of its LOCAL_RANK)")
        index = int(spec.split(":")[1])
    else:
        index = local_rank or 0
    if index >= torch.cuda.device_count():
        raise RlvrError(f"train.device asks for GPU {index} but torch sees {torch.cuda.device_count()} "
                        f"(CUDA_VISIBLE_DEVICES={_visible()})")
    return torch.device("cuda", index)


def _visible() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


def resolve_precision(mixed_precision: str, device: torch.device) -> str:
    """train.mixed_precision -> "bf16" or "no". auto is bf16 autocast over fp32 weights on CUDA (the
    optimizer keeps fp32 master weights, so updates far below bf16's 8-bit mantissa still land) and no
    autocast on the CPU, where bf16 matmuls are slower than fp32 on processors without bf16 units."""
    if mixed_precision != "auto":
        return mixed_precision
    return "bf16" if device.type == "cuda" else "no"


def autocast(device: torch.device, precision: str):
    """The forward's autocast context for a resolved precision ("bf16" or "no")."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def sampling_autocast(device: torch.device, precision: str):
    """The context rollouts and greedy evaluation run in: bf16 autocast on CUDA with precision bf16
    (within one context autocast casts each weight once and keeps the copy, so decoding reads bf16
    weights); nothing on the CPU, whose rollouts keep their format (rollout.weights picks it)."""
    return autocast(device, precision if device.type == "cuda" else "no")


def of_model(model: torch.nn.Module) -> torch.device:
    """The device a model's weights are on (engines and sessions make their tensors there)."""
    return next(model.parameters()).device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (timings of GPU phases); nothing to do on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    """Start a phase's peak-memory count: the CUDA allocator's peak on a GPU; on the CPU the process's peak
    resident set (VmHWM), reset through /proc/self/clear_refs where Linux allows it."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux, or not allowed: the peak then runs from the process's start
        pass


def peak_memory_gib(device: torch.device) -> float | None:
    """The peak since reset_peak_memory, in GiB: tensors the CUDA allocator handed out
    (torch.cuda.max_memory_allocated) on a GPU; on the CPU the process's peak resident set (VmHWM: the
    whole process, Python and libraries included), None where /proc is not there to read."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    try:
        with open("/proc/self/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None
    return kib / 2**20
