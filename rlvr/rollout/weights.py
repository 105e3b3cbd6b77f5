"""The policy's weights as a sampler loads them: Hugging Face names, wrappers stripped, LoRA merged.

One export for every engine that holds its own copy of the weights: vLLM (colocated, rlvr/rollout/vllm_engine.py,
and servers, rlvr/rollout/vllm_server.py) and the bf16 / int8 rollout copies (rlvr/rollout/quant.py).

Every weight the sampler holds is sent, a tied output head included: vLLM's in-place reload
(`reload_weights`, the CPU platform's only way) rebuilds the head from `lm_head.weight` alone, so
a head left out keeps the weights it was loaded with (0.62 nats a token of sampler/trainer mismatch
after the embeddings moved, on SmolLM2-135M); where vLLM shares the head with the embedding, the
extra tensor is skipped by its loader.
"""
from __future__ import annotations

import re

import torch

from rlvr.errors import RlvrError
from rlvr.models import unwrap

# Wrapper prefixes: DDP (module.), torch.compile (_orig_mod.), FSDP1 and activation checkpointing.
_WRAPPERS = re.compile(r"(^|\.)(module|_orig_mod|_fsdp_wrapped_module|_checkpoint_wrapped_module)\.")
_LORA = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])\.(?P<adapter>[^.]+)\.weight$")
_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")


def strip_wrappers(name: str) -> str:
    """'module.base_model.model.model.layers.0...' -> 'model.layers.0...' (PEFT's base_model.model.
    included); LoRA, base_layer and modules_to_save parts are left for vllm_weight_items."""
    while True:  # one pass can miss a wrapper right after another ('module._orig_mod.')
        stripped = _WRAPPERS.sub(lambda m: m.group(1), name)
        if stripped == name:
            return name.removeprefix("base_model.model.")
        name = stripped


def vllm_weight_items(named_tensors, *, tied_head_from: str | None = None,
                      lora_scaling: dict[str, float] | None = None) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a policy's state dict -> the Hugging Face names and tensors that vLLM's
    model.load_weights expects, with LoRA merged: W + scale * B @ A (Hu et al. 2021).

    lora_scaling: LoRA module path (wrapper-free, e.g. 'model.layers.0.self_attn.q_proj') -> scale,
    from `lora_scalings(model)`. tied_head_from: the input embedding's weight name when the output head
    shares it; `lm_head.weight` is then sent as that tensor even where the state dict omits it.
    """
    lora_scaling = lora_scaling or {}
    weights: dict[str, torch.Tensor] = {}
    lora: dict[str, dict[str, torch.Tensor]] = {}
    for raw, tensor in named_tensors:
        if hasattr(tensor, "full_tensor"):  # FSDP2 DTensor shard: gather the full weight
            tensor = tensor.full_tensor()
        tensor = tensor.detach()
        name = strip_wrappers(raw)
        if "lora_embedding_" in name or "lora_magnitude_vector" in name:
            raise RlvrError(f"weight '{raw}': LoRA on embeddings and DoRA cannot be merged for vLLM yet; "
                            "use linear-layer LoRA (model.lora.target_modules) or rollout.engine=builtin")
        m = _LORA.match(name)
        if m:
            lora.setdefault(m["module"], {})[m["part"]] = tensor
            continue
        if ".original_module." in name or name.endswith("rotary_emb.inv_freq"):
            continue
        name = _TO_SAVE.sub(".", name).replace(".base_layer.", ".")
        weights[name] = tensor
    if tied_head_from is not None and "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights[tied_head_from]
    for module, parts in lora.items():
        if set(parts) != {"A", "B"} or module not in lora_scaling or f"{module}.weight" not in weights:
            raise ValueError(f"LoRA module '{module}' needs lora_A, lora_B, its base weight and a scale; "
                             f"found parts {sorted(parts)}, scale {module in lora_scaling}")
        w = weights[f"{module}.weight"]
        delta = parts["B"].float() @ parts["A"].float()  # [out, r] @ [r, in] -> [out, in]
        weights[f"{module}.weight"] = (w.float() + lora_scaling[module] * delta).to(w.dtype)
    return list(weights.items())


def lora_scalings(model: torch.nn.Module) -> dict[str, float]:
    """Scale of each PEFT LoRA layer, keyed by its wrapper-free module path; empty without LoRA."""
    out = {}
    for name, module in model.named_modules():
        scaling = getattr(module, "scaling", None)
        if not isinstance(scaling, dict) or not hasattr(module, "lora_A"):
            continue
        active = list(getattr(module, "active_adapters", scaling))
        if len(active) != 1:
            raise RlvrError(f"LoRA layer '{name}' has active adapters {active}; the vLLM sync merges exactly one")
        if getattr(module, "fan_in_fan_out", False):
            raise RlvrError(f"LoRA layer '{name}' is fan_in_fan_out (Conv1D); the vLLM sync merges nn.Linear only")
        out[strip_wrappers(name)] = float(scaling[active[0]])
    return out


def policy_weight_items(policy: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The policy's current weights, named and merged for vLLM (see vllm_weight_items), the tied head
    included."""
    base = unwrap(policy)
    tied = None
    if getattr(getattr(base, "config", None), "tie_word_embeddings", False):
        embedding = base.get_input_embeddings()
        tied = next(f"{n}.weight" for n, m in base.named_modules() if m is embedding)
    return vllm_weight_items(policy.state_dict().items(), tied_head_from=tied, lora_scaling=lora_scalings(policy))
