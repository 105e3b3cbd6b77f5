"""Where a run computes: `train.device` resolved once into a torch.device, and the precision that goes with it.

    resolve_device("auto")          cuda:0 when torch sees a GPU, else cpu
    resolve_device("cuda", 3)       cuda:3 (torchrun: one GPU per local rank)
    resolve_precision("auto", dev)  "bf16" on CUDA, "no" on the CPU
    determinism("auto", "cpu")      what train.deterministic sets on that device (determinism_applied sets it for a run)

Everything that holds tensors takes the device from here (the policy, the reference, the critic, rollout
copies, evaluation, `rlvr sft`, `rlvr eval`); Python lists stay on the host, and a training batch crosses
to the device at one place (rlvr.rollout.decoding.Rollout.to, called by the loop's make_batch).
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field

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


# What train.deterministic sets on CUDA (verl's full_determinism, transformers' enable_full_determinism): a
# variable the user set already is kept. cuBLAS: a fixed workspace, so its kernels pick no split-K by free
# memory; NCCL: one algorithm and protocol, so an all-reduce sums in the same order whatever its size;
# flash-attention's backward without atomics; vLLM's batch-invariant kernels (a row's tokens do not depend on
# the rows batched with it; rlvr seeds every request from per-group seeds already).
CUDA_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple",
            "FLASH_ATTENTION_DETERMINISTIC": "1", "VLLM_BATCH_INVARIANT": "1"}


@dataclass(frozen=True, kw_only=True)
class Determinism:
    """What train.deterministic resolved to on a device: the settings determinism_applied makes for a run."""

    on: bool
    algorithms: bool = False  # torch.use_deterministic_algorithms(True, warn_only=True)
    cudnn: bool = False  # cudnn.deterministic on, cudnn.benchmark off
    env: dict[str, str] = field(default_factory=dict)  # environment variables, set where unset


def determinism(setting: str, device_type: str) -> Determinism:
    """train.deterministic (auto, on, off) on a device type ("cpu", "cuda") -> what it sets. auto is on for
    the CPU, where it costs nothing measurable, and off on CUDA, where deterministic kernels are slower.

    On the CPU a run is the same bit for bit at a fixed thread count (train.threads) whatever this says:
    rlvr's own code draws from seeded generators and sums in a fixed order; on, torch's deterministic
    algorithms also replace the few kernels of other code (transformers, PEFT) that add with atomics (an
    op with no deterministic version warns). On CUDA, on also fixes cuBLAS's workspace, cuDNN's algorithms,
    NCCL's all-reduce order, flash-attention's backward and vLLM's batching (CUDA_ENV)."""
    if setting not in ("auto", "on", "off"):
        raise RlvrError(f"train.deterministic '{setting}' is not one of auto, on, off")
    on = setting == "on" or (setting == "auto" and device_type == "cpu")
    if not on:
        return Determinism(on=False)
    if device_type == "cpu":
        return Determinism(on=True, algorithms=True)
    return Determinism(on=True, algorithms=True, cudnn=True, env=dict(CUDA_ENV))


@contextlib.contextmanager
def determinism_applied(d: Determinism, environ: dict | None = None):
    """d's settings made in this process for the block (a run: before CUDA, NCCL or vLLM start, which read the
    variables then), and the process's own put back after it (rlvr.fit runs in a user's process). A variable
    the user set already is left as it is. torch fills no new tensor with NaN under it
    (fill_uninitialized_memory off): rlvr reads no memory it has not written, and the fill would cost a write
    of every tensor made. Yields the variables it set."""
    environ = os.environ if environ is None else environ
    set_now = {k: v for k, v in d.env.items() if k not in environ}
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    environ.update(set_now)
    if d.algorithms:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
    if d.cudnn:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield set_now
    finally:
        for k in set_now:
            environ.pop(k, None)
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[3], before[4]
