"""Multi-process training on torch.distributed: `torchrun --nproc-per-node=N -m rlvr train ...`.

Every rank draws the same global batch of prompts (one prompt sampler, one seed), takes its shard of
whole groups (`shard_groups`), samples each group from the group's own seed
(`rlvr.rollout.sampling.group_seed`, the same on any number of ranks), and trains on its shard. Gradients equal the single-process ones because each rank divides its micro-batches' losses by
the GLOBAL batch's units (`rlvr.algo.loss_units`, summed over ranks by `allreduce_scalars` in
rlvr/train/update.py) and the gradients are then SUMMED over ranks (`allreduce_gradients`), the same
sum a single process accumulates over micro-batches.

Why no DistributedDataParallel wrapper: the training forward (rlvr/train/forward.py) calls the trunk
(`model.base_model`) and the head separately, so `DDP.forward`, whose hooks arm the gradient
all-reduce, would never run and gradients would silently stay unsynchronised. DDP would also
average, where the global-normaliser scheme needs a sum, and its per-backward bucketed all-reduce
buys nothing when gradients accumulate over micro-batches anyway. One explicit sum after the last
micro-batch is exact, simple, and leaves the model a plain module that each rank can roll out on
its own ("ddp" mode). "fsdp" mode shards parameters with FSDP2 (`fully_shard`), whose hooks sit on
module forwards, so calling the trunk directly works: see `wrap_model`.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as tdist
import torch.nn.functional as F

from rlvr.device import resolve_device
from rlvr.errors import RlvrError
from rlvr.nf4 import is_nf4
from rlvr.report import schema



@dataclass(kw_only=True, frozen=True)
class Dist:
    """Where this process sits; world 1 means single process and no process group."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None  # gloo, nccl, or None when single process

    @property
    def is_main(self) -> bool:
        """The rank that writes files and prints."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def init_distributed(device: str = "auto", env: dict | None = None, join_timeout_s: float = 300) -> Dist:
    """Resolve train.device (`device`; rlvr.device.resolve_device) and, under torchrun (WORLD_SIZE,
    RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), join the process group: nccl with the GPU of this local
    rank when the device is CUDA, gloo on the CPU. Without torchrun (no WORLD_SIZE, or 1) no process
    group is made and the Dist holds only the device.

    Joining waits at most `join_timeout_s` (train.join_timeout_s) for every process, then stops with an
    RlvrError: a process on another node that fails before it joins (a bad argument, a missing run
    directory) ends its own torchrun, but the agents on the other nodes never hear of it, and their
    processes would wait torch's collective timeout (30 minutes with gloo). Once all have joined,
    collectives get torch's own timeout back: rank 0 alone evaluates and checkpoints while the others
    wait in the next collective, which may take longer than joining should."""
    env = os.environ if env is None else env
    world = int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(device=resolve_device(device))
    missing = [k for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise RlvrError(f"WORLD_SIZE={world} is set but {', '.join(missing)} is not: launch with "
                        f"torchrun --nproc-per-node={world} -m rlvr train ...")
    rank, local_rank = int(env["RANK"]), int(env["LOCAL_RANK"])
    where = resolve_device(device, local_rank)
    backend = "nccl" if where.type == "cuda" else "gloo"
    if where.type == "cuda":
        torch.cuda.set_device(where)
    if not tdist.is_initialized():
        try:
            tdist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=join_timeout_s))
        except tdist.DistError as e:
            raise RlvrError(f"process {rank} of {world}: not every process joined within train.join_timeout_s="
                            f"{join_timeout_s:g} s ({e}). Another process stopped before joining (its own log "
                            "says why; on another node, that node's log), or the nodes were started with "
                            "different --nnodes, --master_addr or --master_port") from None
        from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout
        from torch.distributed.distributed_c10d import _set_pg_timeout
        _set_pg_timeout((default_pg_nccl_timeout if backend == "nccl" else None) or default_pg_timeout)
    return Dist(rank=rank, world=world, local_rank=local_rank, device=where, backend=backend)


def lost_peer(e: BaseException, d: Dist) -> bool:
    """Whether `e` is a collective failing because another process of the job went away (killed, out of
    memory, an error of its own): NCCL and the store raise torch's DistError, gloo a plain RuntimeError
    from its TCP transport ("Connection closed by peer", "Read error")."""
    return d.enabled and (isinstance(e, tdist.DistError) or
                          (isinstance(e, RuntimeError) and "gloo/transport" in str(e)))


def close_distributed(d: Dist) -> None:
    if d.enabled and tdist.is_initialized():
        tdist.destroy_process_group()


def shard_groups(n_prompts: int, rank: int, world: int) -> slice:
    """This rank's prompts of a global batch of n_prompts: a contiguous block of whole groups; rows
    of a [P * G] batch are slice(start * G, stop * G)."""
    if n_prompts % world:
        raise RlvrError(f"rollout.prompts_per_step={n_prompts} is not divisible by the world size {world}: "
                        f"each process trains on whole groups, so choose a multiple of {world}")
    per = n_prompts // world
    return slice(rank * per, (rank + 1) * per)


# ---------------------------------------------------------------- model wrapping and gradients

class _TiedHead(torch.nn.Module):
    """Output projection that reads the input embedding at call time. FSDP2 swaps each parameter for
    its all-gathered copy on the module that owns it (the embedding, inside the sharded trunk); a
    tied nn.Linear outside the trunk would keep pointing at the stale original tensor."""

    def __init__(self, embedding: torch.nn.Embedding):
        super().__init__()
        self.__dict__["embedding"] = embedding  # not a submodule: its weight belongs to the trunk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.embedding.weight)


def _is_tied(model) -> bool:
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and head.weight is emb.weight


def wrap_model(model: torch.nn.Module, mode: str, d: Dist) -> torch.nn.Module:
    """Prepare a Hugging Face causal LM for training on every rank, in place, and return it.

    ddp: the model stays a plain module; its parameters and buffers are broadcast from rank 0 so all
    ranks start identical. Gradients are summed by `allreduce_gradients` after the micro-batches.
    fsdp: FSDP2 `fully_shard` on every decoder layer and on the trunk (`model.base_model`, the root:
    it stays unsharded from its forward to its backward, which the separate head call relies on);
    a tied head becomes `_TiedHead`, an untied one is its own FSDP root. Gradients are
    reduce-scattered as sums (divide factor 1) in the backward pass.
    """
    if mode not in ("ddp", "fsdp"):
        raise RlvrError(f"train.parallel must be ddp or fsdp, got {mode!r}")
    if not d.enabled:
        return model
    if mode == "ddp":
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                tdist.broadcast(t.data, src=0)
        return model
    from torch.distributed.fsdp import fully_shard

    trunk = model.base_model
    layers = getattr(trunk, "layers", None)
    if layers is None:
        raise RlvrError(f"train.parallel=fsdp needs a decoder with a .layers list; {type(trunk).__name__} has "
                        f"none: use train.parallel=ddp")
    tied = _is_tied(model)
    for layer in layers:
        fully_shard(layer)
    fully_shard(trunk)
    if tied:
        model.set_output_embeddings(_TiedHead(model.get_input_embeddings()))
    else:
        fully_shard(model.get_output_embeddings())
    for m in model.modules():
        if hasattr(m, "set_gradient_divide_factor"):
            m.set_gradient_divide_factor(1.0)  # sum, not mean: the loss already carries 1 / global size
            m.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
    return model


def _fsdp_modules(model: torch.nn.Module) -> list:
    return [m for m in model.modules() if hasattr(m, "set_reshard_after_forward") and hasattr(m, "unshard")]


@contextlib.contextmanager
def gathered(model: torch.nn.Module):
    """Hold an FSDP model's full parameters on every rank, so rank-local rollouts and evaluations run
    without collectives (ranks stop generating at different steps). A no-op for a plain model."""
    mods = _fsdp_modules(model)
    roots = [m for m in mods if not any(m is not o and any(m is s for s in o.modules()) for o in mods)]
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield model
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(not any(m is r for r in roots), recurse=False)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _sharded(t: torch.Tensor) -> bool:
    return hasattr(t, "to_local")  # a DTensor: FSDP already reduced it


BUCKET_ELEMENTS = 2**25  # gradient elements per all-reduce (128 MB in fp32): the most copied at once


def buckets(sizes: list[int], limit: int = BUCKET_ELEMENTS) -> list[range]:
    """Consecutive runs of tensors (by element count) of at most `limit` elements in all, a larger tensor
    alone: [3, 4, 2, 9, 1], limit 8 -> [0, 1], [2], [3], [4]."""
    out, start, total = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > limit:
            out.append(range(start, i))
            start, total = i, 0
        total += n
    return out + ([range(start, len(sizes))] if sizes else [])


def allreduce_gradients(params: list[torch.Tensor], d: Dist) -> None:
    """Sum the gradients of replicated parameters over ranks, one all-reduce per bucket of at most
    BUCKET_ELEMENTS (a tensor alone in its bucket is reduced in place; smaller ones are flattened
    together, so at most one bucket's copy exists, not a copy of every gradient). A parameter
    whose gradient is None on some ranks and set on others gets zeros where missing; one that has no
    gradient anywhere keeps None (the optimizer skips it, as in one process). Sharded (FSDP)
    gradients are left alone."""
    if not d.enabled:
        return
    params = [p for p in params if not _sharded(p)]
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=d.device)
    tdist.all_reduce(has)
    live = [p for p, h in zip(params, has.tolist()) if h > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if not live:
        return
    for bucket in buckets([p.grad.numel() for p in live]):
        grads = [live[i].grad for i in bucket]
        if len(grads) == 1 and grads[0].is_contiguous():
            tdist.all_reduce(grads[0])
            continue
        flat = torch.cat([g.reshape(-1) for g in grads])
        tdist.all_reduce(flat)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))


def clip_grad_norm(params: list[torch.Tensor], max_norm: float, d: Dist) -> float:
    """torch.nn.utils.clip_grad_norm_ for a mix of sharded (FSDP) and replicated gradients: the
    global L2 norm (shards' squares summed over ranks, replicated counted once), then scale by
    max_norm / (norm + 1e-6) when above max_norm. Call after `allreduce_gradients`. Returns the norm."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    # per-tensor norms in one fused call each (no float64 copy of every gradient), summed in float64
    squares = lambda gs: (torch.stack(torch._foreach_norm(gs)).double().pow(2).sum() if gs
                          else torch.zeros((), dtype=torch.float64))
    sharded = squares([_local(g) for g in grads if _sharded(g)])
    replicated = squares([g for g in grads if not _sharded(g)])
    if d.enabled and any(_sharded(g) for g in grads):
        sharded = sharded.to(d.device)
        tdist.all_reduce(sharded)
    norm = math.sqrt(float(sharded) + float(replicated))
    coef = max_norm / (norm + 1e-6)
    if math.isfinite(norm) and coef < 1:
        for g in grads:
            _local(g).mul_(coef)
    return norm


# ---------------------------------------------------------------- reductions and statistics

def allreduce_scalars(values: dict[str, float], d: Dist, op: str = "sum") -> dict[str, float]:
    """Reduce a dict of floats over ranks in one collective (op: sum, min or max). Every rank must pass
    the same keys."""
    if not d.enabled:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=d.device)
    tdist.all_reduce(t, {"sum": tdist.ReduceOp.SUM, "min": tdist.ReduceOp.MIN, "max": tdist.ReduceOp.MAX}[op])
    return dict(zip(keys, t.tolist()))


# ---------------------------------------------------------------- metrics and objects

def combine_metrics(per_rank: list[dict], weights: list[float]) -> dict:
    """Merge each rank's metrics as the metric schema says (rlvr/report/schema.py `across_ranks`): counts
    are summed; ratio/min is the min, ratio/max, time/* and memory/* the max; any other number is the
    mean weighted by each rank's weight (its number of completions). A non-count value
    equal on every rank is kept as it is (step, lr, globally reduced update metrics); None stays None; a key
    some ranks lack (a pass_rate/<difficulty> not in their shard) is combined over those that have it.
    Weighted means of stds and quantiles (reward/std, completion/length_p90) are approximations."""
    out: dict = {}
    for key in dict.fromkeys(k for m in per_rank for k in m):
        pairs = [(m[key], w) for m, w in zip(per_rank, weights) if m.get(key) is not None]
        if not pairs:
            out[key] = None
            continue
        values, rule = [v for v, _ in pairs], schema.across_ranks(key)
        if rule == "sum":
            out[key] = sum(values)
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        elif rule == "min":
            out[key] = min(values)
        elif rule == "max":
            out[key] = max(values)
        else:
            total = sum(w for _, w in pairs)
            out[key] = sum(v * w for v, w in pairs) / total if total > 0 else sum(values) / len(values)
    return out


def gather_objects(obj, d: Dist) -> list:
    """Every rank's obj, in rank order, on every rank (picklable objects; [obj] when single process)."""
    if not d.enabled:
        return [obj]
    out = [None] * d.world
    tdist.all_gather_object(out, obj)
    return out


def reduce_metrics(metrics: dict, d: Dist, weight: float) -> dict:
    """`combine_metrics` over ranks; weight is this rank's number of completions."""
    if not d.enabled:
        return dict(metrics)
    gathered_ = gather_objects((metrics, float(weight)), d)
    return combine_metrics([m for m, _ in gathered_], [w for _, w in gathered_])


# ---------------------------------------------------------------- portable checkpoints

def _full_options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)


def is_fsdp(model: torch.nn.Module) -> bool:
    return bool(_fsdp_modules(model))


def full_state_dict(model: torch.nn.Module, d: Dist) -> dict[str, torch.Tensor]:
    """The unsharded model state dict, as a plain Hugging Face model of the same class has it, on
    rank 0 (other ranks get {} in fsdp mode). Every rank must call it (fsdp gathers shards). A
    checkpoint saved from it loads into any number of processes, or none."""
    if not is_fsdp(model):
        # a frozen 4-bit base weight (model.quantize) never changes in place: held as it is, not re-quantised
        return {k: v.detach().cpu() if is_nf4(v) else v.detach().cpu().clone()
                for k, v in model.state_dict().items()} if d.is_main else {}
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    sd = get_model_state_dict(model, options=_full_options())
    head = model.get_output_embeddings()
    if isinstance(head, _TiedHead) and sd:
        name = next(n for n, m in model.named_modules() if m is head)
        emb = next(n for n, m in model.named_modules() if m is head.embedding)
        sd[f"{name}.weight"] = sd[f"{emb}.weight"]
    return sd if d.is_main else {}


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor], d: Dist) -> None:
    """Load a `full_state_dict` into a (wrapped) model on every rank; in fsdp mode only rank 0 needs
    `state` (others may pass {}), in ddp mode every rank loads it."""
    if not is_fsdp(model):
        model.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    head = model.get_output_embeddings()
    if isinstance(head, _TiedHead):
        name = next(n for n, m in model.named_modules() if m is head)
        state = {k: v for k, v in state.items() if k != f"{name}.weight"}
    set_model_state_dict(model, state, options=_full_options(broadcast_from_rank0=True))
