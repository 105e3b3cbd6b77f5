"""A lean decode step for Llama-family models, compiled for rollout copies (`rollout.compile`).

A decode step feeds one token per row, and at batch 16 on a CPU each tensor op is small: the transformers
forward of the int8 copy runs about 80 ops per layer (2,400 per token), and outside the integer products
and attention they take about as long as the products themselves. Eager, fewer ops alone did not help:
`step` below (one fused RMSNorm, RoPE on 2-D views, one additive mask per step for every layer, attention
per key head with its group of query heads, fused siblings as one product) decodes as fast as the
transformers forward, within noise. Compiled, it does: `compile_decode(copy)` runs each layer of a
rollout copy (rlvr.rollout.quant, bf16 or int8) as two torch.compile'd functions of plain tensors, the
norm, the activation quantisation, the rescaling, RoPE, SiLU and the residuals fused into a few C++ loops
around the integer (or bf16) products, with attention and the cache update between them left eager.
bench/rollout_weights.py, 16 rows x 256 tokens on 2 cores: 1.22-1.31x the tokens/s of the same copy
uncompiled. One compilation serves every layer (the weights are arguments, never constants) and every
batch size (dynamic shapes); it takes 6-30 s at the first decode step (cached on disk) and needs a C++
compiler; if it fails, decoding goes on through `step` uncompiled, and then the transformers forward.

`step` matches the transformers forward up to float rounding (tests/rollout/test_lean.py); the engine
uses it only for a compiled copy (`is_compiled`).
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.models.lora import unwrap
from rlvr.rollout.quant import Bf16Linear, Int8Linear, FusedSlice, bf16_linear, int8_linear

log = logging.getLogger(__name__)

# Pre-norm decoders with rotate-half RoPE, grouped-query attention and a gated MLP, whose attention is
# exactly softmax(q k^T * scaling + mask) v: no sliding window, q/k norms, soft-capping or sinks.
FAMILIES = ("llama", "mistral", "qwen2")


def supports(model: nn.Module) -> bool:
    """True when `step` computes what `model`'s own forward does (a FAMILIES model, full attention)."""
    lm = unwrap(model)
    config = getattr(lm, "config", None)
    if config is None or getattr(config, "model_type", None) not in FAMILIES:
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
        return False
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return False
    trunk = getattr(lm, "model", None)
    return trunk is not None and all(hasattr(layer, "self_attn") and hasattr(layer, "mlp") for layer in trunk.layers)


def _rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, x.shape[-1:], norm.weight, norm.variance_epsilon)


def _products(x: torch.Tensor, *modules: nn.Module) -> list[torch.Tensor]:
    """Each module applied to x [A, K]; FusedSlices of one fused layer share a single product."""
    if all(isinstance(m, FusedSlice) for m in modules) and len({id(m.shared) for m in modules}) == 1:
        y = modules[0].shared.layer(x)  # [A, sum of the parts' rows]
        return [y[:, m.start:m.stop] for m in modules]
    return [m(x) for m in modules]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE: x [A, heads, D], cos / sin [A, 1, D]."""
    half = x.shape[-1] // 2
    return torch.addcmul(x * cos, torch.cat((-x[..., half:], x[..., :half]), -1), sin)


def _attend(kv, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
            scaling: float) -> torch.Tensor:
    """Append k, v [A, HK, 1, D] to the layer's cache kv, then attend with q [A, H, D] over it (mask bias
    [A, 1, 1, L]): each key head with its group of H / HK query heads, none repeated. Returns [A, H * D]."""
    keys, values = kv.update(k, v)  # [A, HK, L, D] each, the new token last
    a, d = q.shape[0], q.shape[-1]
    o = F.scaled_dot_product_attention(q.reshape(a, keys.shape[1], -1, d), keys, values, attn_mask=bias,
                                       scale=scaling)  # [A, HK, H / HK, D]
    return o.reshape(a, -1)


def _layer(layer: nn.Module, kv, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           bias: torch.Tensor) -> torch.Tensor:
    """One decoder layer for one new token per row: x [A, E] -> [A, E]; kv: the layer's cache (appended to)."""
    attn, mlp = layer.self_attn, layer.mlp
    a, d = x.shape[0], attn.head_dim
    q, k, v = _products(_rms_norm(layer.input_layernorm, x), attn.q_proj, attn.k_proj, attn.v_proj)
    q = _rotate(q.reshape(a, -1, d), cos, sin)  # [A, H, D]
    k = _rotate(k.reshape(a, -1, d), cos, sin)  # [A, HK, D]
    x = x + attn.o_proj(_attend(kv, q, k[:, :, None], v.reshape(a, -1, 1, d), bias, attn.scaling))  # [A, E]
    gate, up = _products(_rms_norm(layer.post_attention_layernorm, x), mlp.gate_proj, mlp.up_proj)
    return x + mlp.down_proj(mlp.act_fn(gate) * up)


def _linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
            bias: torch.Tensor | None) -> torch.Tensor:
    """What Int8Linear (scale given) or Bf16Linear computes, as a function of its tensors: x [A, K] -> [A, N]."""
    return bf16_linear(x, weight, bias) if scale is None else int8_linear(x, weight, scale, bias)


def _attention_inputs(x, norm, eps: float, w, s, b, cos, sin, heads: int, kv_heads: int):
    """x [A, E] -> rotated q [A, H, D], rotated k [A, HK, 1, D], v [A, HK, 1, D] through one fused q/k/v
    product (weight w, scale s, bias b)."""
    a = x.shape[0]
    y = _linear(F.rms_norm(x, x.shape[-1:], norm, eps), w, s, b)  # [A, (H + 2 HK) D]
    d = y.shape[1] // (heads + 2 * kv_heads)
    qk = _rotate(y[:, :(heads + kv_heads) * d].reshape(a, heads + kv_heads, d), cos, sin)
    return qk[:, :heads], qk[:, heads:, None], y[:, (heads + kv_heads) * d:].reshape(a, kv_heads, 1, d)


def _output_and_mlp(x, o, o_w, o_s, o_b, norm, eps: float, gu_w, gu_s, gu_b, d_w, d_s, d_b):
    """The rest of a layer: x [A, E] plus the attention output o [A, H * D] projected, then plus the gated
    SiLU MLP (gate and up as one product) of that."""
    x = x + _linear(o, o_w, o_s, o_b)
    gate_up = _linear(F.rms_norm(x, x.shape[-1:], norm, eps), gu_w, gu_s, gu_b)  # [A, 2 I]
    i = gate_up.shape[1] // 2
    return x + _linear(F.silu(gate_up[:, :i]) * gate_up[:, i:], d_w, d_s, d_b)


def _tensors(module: nn.Module) -> tuple:
    """(weight, scale or None, bias) of a rollout-copy linear layer, or of the fused layer behind a FusedSlice."""
    layer = module.shared.layer if isinstance(module, FusedSlice) else module
    return layer.weight, getattr(layer, "scale", None), layer.bias


class CompiledLayers:
    """The two compiled halves of a decoder layer (module docstring) and the tensors each layer feeds them."""

    def __init__(self, lm: nn.Module):
        self.inputs = torch.compile(_attention_inputs, dynamic=True)
        self.rest = torch.compile(_output_and_mlp, dynamic=True)
        self.args = {}
        for layer in lm.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            norms = (layer.input_layernorm, layer.post_attention_layernorm)
            self.args[id(layer)] = (
                (norms[0].weight, norms[0].variance_epsilon, *_tensors(attn.q_proj)),
                (*_tensors(attn.o_proj), norms[1].weight, norms[1].variance_epsilon, *_tensors(mlp.gate_proj),
                 *_tensors(mlp.down_proj)))
        config = lm.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads

    def layer(self, layer: nn.Module, kv, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              bias: torch.Tensor) -> torch.Tensor:
        """As `_layer`, through the compiled halves."""
        first, rest = self.args[id(layer)]
        q, k, v = self.inputs(x, *first, cos, sin, self.heads, self.kv_heads)
        return self.rest(x, _attend(kv, q, k, v, bias, layer.self_attn.scaling), *rest)


def compilable(model: nn.Module) -> bool:
    """True for a rollout copy (bf16 or int8, q/k/v and gate/up fused) of a `supports` model with a SiLU MLP."""
    if not supports(model):
        return False
    lm = unwrap(model)
    fused = (Int8Linear, Bf16Linear)
    for layer in lm.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        parts = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj)
        if not all(isinstance(m, FusedSlice) and isinstance(m.shared.layer, fused) for m in parts):
            return False
        if not all(isinstance(m, fused) for m in (attn.o_proj, mlp.down_proj)):
            return False
    return getattr(lm.config, "hidden_act", None) == "silu"


def compile_decode(model: nn.Module) -> bool:
    """Make `step` run `model` (a rollout copy) through compiled layers; False (nothing changed) when it
    is not `compilable`. The compilation itself happens at the first step."""
    if not compilable(model):
        return False
    unwrap(model).rlvr_compiled = CompiledLayers(unwrap(model))
    return True


def is_compiled(model: nn.Module) -> bool:
    """True when `model` decodes through compiled layers (compile_decode, not since fallen back)."""
    return getattr(unwrap(model), "rlvr_compiled", None) is not None


def _run_layers(lm: nn.Module, cache, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
    compiled = getattr(lm, "rlvr_compiled", None)
    if compiled is not None:
        start = [layer.length for layer in cache.layers] if all(hasattr(l, "length") for l in cache.layers) else None
        try:
            h = x
            for layer, kv in zip(lm.model.layers, cache.layers):
                h = compiled.layer(layer, kv, h, cos, sin, bias)
            return h
        except Exception as e:  # no C++ compiler, an inductor bug: decode uncompiled from here on
            if start is None:
                raise
            log.warning("rollout.compile: torch.compile failed (%s: %s); decoding uncompiled", type(e).__name__, e)
            lm.rlvr_compiled = None
            for layer, n in zip(cache.layers, start):  # undo this step's cache writes
                layer.length = n
                layer._views()
    for layer, kv in zip(lm.model.layers, cache.layers):
        x = _layer(layer, kv, x, cos, sin, bias)
    return x


@torch.no_grad()
def step(model: nn.Module, tokens: torch.Tensor, positions: torch.Tensor, cache, mask: torch.Tensor) -> torch.Tensor:
    """Feed one token per row and return the next-token logits [A, V]. tokens [A], positions [A];
    cache: a transformers cache whose layers hold [A, HK, L - 1, D] and get the new token appended;
    mask [A, L]: 1 on the positions each row attends to, the new token's (last) included."""
    lm = unwrap(model)
    trunk = lm.model
    x = trunk.embed_tokens(tokens)  # [A, E]
    cos, sin = trunk.rotary_emb(x, positions[:, None])  # [A, 1, D] each
    bias = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(mask == 0, float("-inf"))
    bias = bias[:, None, None]  # [A, 1, 1, L]
    x = _run_layers(lm, cache, x, cos, sin, bias)
    return lm.lm_head(_rms_norm(trunk.norm, x))
