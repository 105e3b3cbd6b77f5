"""Rollout weights in a smaller format than the training weights (`rollout.weights`).

Decoding a token reads every weight once, so on a CPU its time follows the bytes of the weights
(SmolLM2-135M: 540 MB in fp32). A rollout copy of the policy holds its linear layers (attention, MLP
and the lm_head) in a smaller format; the rest (embedding lookup, norms, rotary tables, KV cache,
logits, sampling) stays in the policy's dtype:

    bf16  Bf16Linear: bf16 weights, the matmul in bf16 (activations cast in, the result cast back).
    int8  Int8Linear: int8 weights with one fp32 scale per output row (symmetric absmax), and each
          activation row quantised the same way on the fly (dynamic W8A8), so the matmul is one integer
          GEMM (`torch._int_mm`, int32 accumulation) rescaled by scale_x[m] * scale_w[n]. Each row's result
          depends on that row alone, so batching does not change what a row samples.
    snapshot  SnapshotLinear: the weights in their own dtype, unfused: the policy as it was at the last
          refresh (rollout.overlap samples from it while the trainer updates the policy itself).

bench/rollout_weights.py on a 2-core AVX-512 (VNNI, bf16) CPU, SmolLM2-135M, batch 16: the decode step's
matmuls take fp32 103 ms, bf16 60 ms (1.7x), int8 49 ms (2.1x); the whole built-in engine, 256 new
tokens at torch's default 2 threads, decodes 1.66x (bf16, 210 tokens/s) and 1.88x (int8, 238) the
tokens/s of fp32 (127). Siblings that read the same input (q, k, v; gate, up: FUSE) run as one product
(FusedSlice). Weight-only int8 (`torch.ops.aten._weight_int8pack_mm`) is no faster than fp32 there with bf16
activations and 20x slower with fp32 ones, hence W8A8. The price is accuracy: against fp32, mean |log p
difference| per token 0.008 (bf16) and 0.06 (int8; weight-only int8 would be 0.02, so most of it is the
activation rounding), greedy answers identical 90% (bf16) and 69% (int8) of the time. The trainer
corrects the sampler's bias with truncated importance sampling, on by default for these formats
(rollout.tis_cap, rlvr.rollout.engines.tis_cap_of).

    copy = rollout_copy(policy, "int8")   # once
    refresh(copy, policy)                  # after every optimizer step: re-quantise in place

The copy is a snapshot: training never touches it, `refresh` brings it up to date. A PEFT/LoRA policy
is merged into the copy (W + scale * B @ A, as the vLLM sync does); the weights come from
`policy_weight_items`, which also strips DDP / compile wrappers.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.errors import RlvrError
from rlvr.models.lora import unwrap
from rlvr.rollout.weights import policy_weight_items

QMAX = 127  # symmetric int8: -128 is never used, so q and -q are both representable


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax int8 per row: x [N, K] -> (q int8 [N, K], scale fp32 [N]), x ~= q * scale[:, None],
    scale = max|x[n]| / 127, so each element is off by at most scale / 2. An all-zero row gets scale 0."""
    x = x.float()
    top = x.abs().amax(-1)  # [N] max |x[n]| (5x faster here than linalg.vector_norm(x, inf))
    inverse = QMAX / top.clamp(min=torch.finfo(torch.float32).tiny)  # [N]
    q = (x * inverse[:, None]).round_()  # [N, K], within [-127, 127]: max |x| * (127 / max |x|) rounds to 127
    return q.to(torch.int8), top / QMAX


class Int8Linear(nn.Module):
    """y = x W^T (+ b) with W int8 per output row and x quantised per row at run time (module docstring).
    Buffers: weight int8 [N, K], scale fp32 [N], bias [N] or None."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        q, scale = quantize_rows(weight.detach())
        self.register_buffer("weight", q)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @torch.no_grad()
    def load(self, weight: torch.Tensor, bias: torch.Tensor | None = None, start: int = 0) -> None:
        """Re-quantise from weight [N, K] (and bias [N]) into the same buffers, at rows start .. start + N."""
        q, scale = quantize_rows(weight)
        rows = slice(start, start + len(q))
        self.weight[rows] = q
        self.scale[rows] = scale
        if bias is not None:
            self.bias[rows] = bias

    def dequantized(self) -> torch.Tensor:
        """The weight this layer multiplies by: q * scale, fp32 [N, K]."""
        return self.weight.float() * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = int8_linear(x.reshape(-1, x.shape[-1]), self.weight, self.scale, self.bias)  # [M, N] fp32
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def int8_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Int8Linear's product as a function of its buffers: x [M, K] -> fp32 [M, N]."""
    q, sx = quantize_rows(x)  # [M, K] int8, [M]
    y = (torch._int_mm(q, weight.t()) * sx[:, None]).mul_(scale)  # int32 [M, N] -> fp32
    return y if bias is None else y + bias


class CopiedLinear(nn.Module):
    """A linear layer over plain weight [N, K] and bias [N] buffers (a copy in some dtype), refreshed in place."""

    @torch.no_grad()
    def load(self, weight: torch.Tensor, bias: torch.Tensor | None = None, start: int = 0) -> None:
        """Copy weight [N, K] (and bias [N]) into the buffers, at rows start .. start + N."""
        rows = slice(start, start + len(weight))
        self.weight[rows] = weight
        if bias is not None:
            self.bias[rows] = bias

    def dequantized(self) -> torch.Tensor:
        return self.weight.float()


class Bf16Linear(CopiedLinear):
    """y = x W^T (+ b) computed in bf16 (bf16 weight [N, K] buffer), returned in x's dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("weight", weight.detach().to(torch.bfloat16, copy=True))
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.bfloat16, copy=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bf16_linear(x, self.weight, self.bias)


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Bf16Linear's product as a function of its buffers: x [..., K] -> [..., N] in x's dtype; under bf16
    autocast, what autocast makes of nn.Linear over the fp32 weight (x cast to bf16, a bf16 result), so a
    bf16 copy samples exactly what the trainer's autocast forward computes."""
    if torch.is_autocast_enabled(x.device.type) and torch.get_autocast_dtype(x.device.type) == weight.dtype:
        return F.linear(x, weight, bias)
    return F.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


class SnapshotLinear(CopiedLinear):
    """y = x W^T (+ b) over a copy of the weight in its own dtype: a rollout copy that is the policy as it
    was at the last refresh, for sampling while the trainer updates the policy itself (rollout.overlap)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


# snapshot is internal (rollout.overlap on a policy sampled in its own format), not a rollout.weights value
_MODULES = {"bf16": Bf16Linear, "int8": Int8Linear, "snapshot": SnapshotLinear}
FUSE = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # siblings that read the same input


class FusedProduct:
    """The one product of a fused group (a plain object: the layer is registered once, on the parent) and
    the input it was last run on."""

    def __init__(self, layer: nn.Module):
        self.layer, self.x, self.version, self.y = layer, None, -1, None

    def output(self, x: torch.Tensor) -> torch.Tensor:
        if self.x is not x or self.version != x._version:  # another input, or this one changed in place
            self.x, self.version, self.y = x, x._version, self.layer(x)
        return self.y


class FusedSlice(nn.Module):
    """One member of a fused group (FUSE: q, k and v, or gate and up, which the model calls on the same
    hidden states): its rows start .. stop of the group's weight. The first member's call runs one
    product for the whole group (one activation quantisation, one larger GEMM); the others take their
    columns of it; the last member lets the result go."""

    def __init__(self, shared: FusedProduct, start: int, stop: int, last: bool):
        super().__init__()
        self.shared, self.start, self.stop, self.last = shared, start, stop, last

    @property
    def weight(self) -> torch.Tensor:
        return self.shared.layer.weight[self.start:self.stop]

    def dequantized(self) -> torch.Tensor:
        return self.shared.layer.dequantized()[self.start:self.stop]

    def load(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.shared.layer.load(weight, bias, self.start)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.shared.output(x)[..., self.start:self.stop]
        if self.last:
            self.shared.x = self.shared.y = None
        return y


def _is_lora(module: nn.Module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def _linear_names(model: nn.Module) -> list[str]:
    """Paths of the linear layers to swap: plain nn.Linear and PEFT LoRA layers, not the parts of one."""
    names, lora = [], ()
    for name, module in model.named_modules():
        if lora and name.startswith(lora):  # base_layer, lora_A, lora_B of a LoRA layer already listed
            continue
        if _is_lora(module):
            lora += (name + ".",)
        if _is_lora(module) or isinstance(module, nn.Linear):
            names.append(name)
    return names


def _check(policy: nn.Module, fmt: str) -> None:
    if fmt not in _MODULES:
        raise RlvrError(f"rollout.weights '{fmt}' has no rollout copy; one of {', '.join(_MODULES)}")
    names = [n for n, _ in policy.named_parameters()]
    bad = [n for n in names if any(k in n for k in ("lora_embedding_", "lora_magnitude_vector", "modules_to_save"))]
    if bad:
        raise RlvrError(f"rollout.weights={fmt}: LoRA on embeddings, DoRA and PEFT modules_to_save ({bad[0]}) cannot "
                        "be merged into the rollout copy; use linear-layer LoRA (model.lora.target_modules) or "
                        "rollout.weights=fp32")
    if any(hasattr(p, "full_tensor") for p in policy.parameters()):
        raise RlvrError(f"rollout.weights={fmt} does not support sharded (FSDP) policies yet; use "
                        "train.parallel=ddp or rollout.weights=fp32")


def _weights(items: dict[str, torch.Tensor], names: list[str], tied_to: str | None) -> dict[str, torch.Tensor]:
    """module path -> its weight [N, K] from policy_weight_items; a tied output projection (dropped there)
    reads the input embedding's."""
    return {n: items[f"{n}.weight" if f"{n}.weight" in items or tied_to is None else f"{tied_to}.weight"]
            for n in names}


def _tied_name(model: nn.Module) -> str | None:
    """The input embedding's path when the output projection shares its weight, else None."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return None
    embedding = model.get_input_embeddings()
    return next(n for n, m in model.named_modules() if m is embedding)


def rollout_copy(policy: nn.Module, fmt: str) -> nn.Module:
    """A copy of `policy` (a Hugging Face causal LM, possibly PEFT/LoRA- or DDP-wrapped) for sampling,
    its linear layers in format `fmt` (bf16 or int8, module docstring), LoRA merged; eval mode, no
    gradients. The big linear weights are never copied in fp32 (peak memory: the copy itself)."""
    _check(policy, fmt)
    base = unwrap(policy)
    names = _linear_names(base)
    embedding_ids = {id(p) for m in base.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    memo = {}
    for name in names:  # deepcopy takes these as already copied: a placeholder, replaced below
        module = base.get_submodule(name)
        weight = (module.base_layer if _is_lora(module) else module).weight
        if id(weight) not in embedding_ids:
            memo[id(weight)] = nn.Parameter(weight.new_empty(0), requires_grad=False)
    model = copy.deepcopy(base, memo)
    weights = _weights(dict(policy_weight_items(policy)), names, _tied_name(base))
    biases = {n: (m.base_layer if _is_lora(m) else m).bias for n in names for m in [base.get_submodule(n)]}
    # a snapshot computes each product as the policy does (unfused), so it samples the very tokens the
    # policy would have at the weights it holds
    groups = _fusable(names, biases) if fmt != "snapshot" else []
    fused = {n for group in groups for n in group}
    for name in names:
        if name not in fused:
            model.set_submodule(name, _MODULES[fmt](weights[name], biases[name]))
    for group in groups:
        bias = None if biases[group[0]] is None else torch.cat([biases[n] for n in group])
        layer = _MODULES[fmt](torch.cat([weights[n] for n in group]), bias)
        _fuse(model, group, [len(weights[n]) for n in group], layer)
    model.requires_grad_(False)
    return model.eval()


def _fusable(names: list[str], biases: dict) -> list[list[str]]:
    """Groups of FUSE siblings present among `names`, all with a bias or all without."""
    groups = []
    for parent in dict.fromkeys(n.rpartition(".")[0] for n in names):
        for members in FUSE:
            group = [f"{parent}.{m}" if parent else m for m in members]
            if all(n in biases for n in group) and len({biases[n] is None for n in group}) == 1:
                groups.append(group)
    return groups


def _fuse(model: nn.Module, group: list[str], rows: list[int], layer: nn.Module) -> None:
    """Replace the modules named `group` (siblings, rows[i] output rows each) by FusedSlices of `layer`, which is
    registered on their parent."""
    parent = group[0].rpartition(".")[0]
    model.get_submodule(parent).register_module("fused_" + "_".join(n.rpartition(".")[2] for n in group), layer)
    shared, start = FusedProduct(layer), 0
    for i, (name, n) in enumerate(zip(group, rows)):
        model.set_submodule(name, FusedSlice(shared, start, start + n, i == len(group) - 1))
        start += n


@torch.no_grad()
def refresh(rollout_model: nn.Module, policy: nn.Module) -> None:
    """Bring a `rollout_copy` up to the policy's current weights, in place (same buffers): re-quantise
    every swapped linear layer (LoRA merged) and copy the other parameters (norms, embedding)."""
    modules = dict(rollout_model.named_modules())
    behind_parts = {id(m.shared.layer) for m in modules.values() if isinstance(m, FusedSlice)}  # loaded through them
    names = [n for n, m in modules.items() if isinstance(m, (FusedSlice, *_MODULES.values())) and id(m) not in behind_parts]
    items = dict(policy_weight_items(policy))
    weights = _weights(items, names, _tied_name(unwrap(policy)))
    for name in names:
        rollout_model.get_submodule(name).load(weights[name], items.get(f"{name}.bias"))
    for name, p in rollout_model.named_parameters():
        p.copy_(items[name])
