"""The policy's weights as a sampler loads them: Hugging Face names, wrappers stripped, LoRA merged; or, for
vLLM with LoRA, the adapters alone in PEFT's format (`write_adapter`), which vLLM serves on the base it loaded.

One export for every engine that holds its own copy of the weights: vLLM (colocated, rlvr/rollout/vllm_engine.py,
and servers, rlvr/rollout/vllm_server.py) and the bf16 / int8 rollout copies (rlvr/rollout/quant.py).

Which of the two a vLLM push is (rollout.vllm.sync, `resolve_sync`): auto pushes the adapters wherever vLLM's
LoRA serves them, and the merged weights where it cannot (`adapter_obstacle`: LoRA on the embeddings or the
output head, modules_to_save, DoRA, LoRA biases, a rank above vLLM's largest); a 4-bit base (model.quantize=nf4)
only ever pushes adapters, since vLLM holds its own base in the model's dtype.

Every weight the sampler holds is sent, a tied output head included: vLLM's in-place reload
(`reload_weights`, the CPU platform's only way) rebuilds the head from `lm_head.weight` alone, so
a head left out keeps the weights it was loaded with (0.62 nats a token of sampler/trainer mismatch
after the embeddings moved, on SmolLM2-135M); where vLLM shares the head with the embedding, the
extra tensor is skipped by its loader.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.lora import is_peft, unwrap

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


# ---------------------------------------------------------------- adapters (rollout.vllm.sync)

SYNCS = ("auto", "adapters", "merged")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's max_lora_rank choices (vllm/config/lora.py)
ADAPTER_FILE = "adapter_model.safetensors"


def peft_model(policy: torch.nn.Module):
    """The PEFT model inside DDP / FSDP1 wrappers, or None without LoRA (FSDP2 shards the PeftModel in place)."""
    while not is_peft(policy) and hasattr(policy, "module"):
        policy = policy.module
    return policy if is_peft(policy) else None


def adapter_config(policy: torch.nn.Module):
    """The active adapter's PEFT LoraConfig."""
    model = peft_model(policy)
    return model.peft_config[model.active_adapter]


def adapter_rank(policy: torch.nn.Module) -> int:
    """The largest LoRA rank of the policy's adapter (its rank_pattern included)."""
    config = adapter_config(policy)
    return max([config.r, *(config.rank_pattern or {}).values()])


def vllm_lora_rank(rank: int) -> int:
    """vLLM's max_lora_rank for adapters of `rank`: the smallest of its choices that holds them."""
    return next(r for r in VLLM_LORA_RANKS if r >= rank)


def adapter_obstacle(policy: torch.nn.Module) -> str | None:
    """Why vLLM cannot serve the policy's LoRA as adapters on its base (so the push must be merged), or None.
    vLLM 0.32 refuses modules_to_save (bar classification heads), DoRA, LoRA biases and ranks above 512
    (vllm/lora/peft_helper.py); rlvr sends adapters of the decoder's linear layers only, since vLLM's LoRA on
    embeddings and output heads depends on the model class (and a tied head shares its weight)."""
    model = peft_model(policy)
    if model is None:
        return "the policy has no LoRA adapters (model.lora.r is 0)"
    config = adapter_config(policy)
    inner = unwrap(model)
    head, embedding = inner.get_output_embeddings(), inner.get_input_embeddings()
    for name, module in inner.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        where = {id(module), id(getattr(module, "base_layer", None))}  # the head may be the LoRA wrapper itself
        if where & {id(head), id(embedding)}:
            return f"LoRA on the {'output head' if id(head) in where else 'embeddings'} ('{strip_wrappers(name)}')"
    if config.modules_to_save:
        return f"modules_to_save {sorted(config.modules_to_save)} (vLLM serves whole modules for classifier heads only)"
    if config.use_dora:
        return "DoRA (vLLM does not serve it)"
    if config.bias != "none" or getattr(config, "lora_bias", False):
        return "LoRA biases (vLLM does not serve them)"
    if adapter_rank(policy) > VLLM_LORA_RANKS[-1]:
        return f"rank {adapter_rank(policy)} (vLLM serves ranks up to {VLLM_LORA_RANKS[-1]})"
    if isinstance(config.init_lora_weights, str) and config.init_lora_weights.lower() in ("pissa", "olora", "loftq", "corda"):
        return f"init_lora_weights={config.init_lora_weights} (it changes the base weights vLLM loads from disk)"
    return None


def resolve_sync(sync: str, policy: torch.nn.Module, *, quantized: bool, whole_tensors: bool = False) -> tuple[str, str]:
    """rollout.vllm.sync for this policy -> ("adapters" or "merged", a note to print or ""). quantized: a 4-bit
    base (model.quantize=nf4), which vLLM cannot hold, so its adapters are the only push. whole_tensors: the push
    can only move whole weights (rollout.vllm.weight_push=nccl), so auto merges plain LoRA."""
    if sync not in SYNCS:
        raise ValueError(f"sync must be one of {SYNCS}, not {sync!r}")
    if peft_model(policy) is None:
        if sync == "adapters":
            raise RlvrError("rollout.vllm.sync=adapters pushes LoRA adapters, and this policy has none: set "
                            "model.lora.r > 0, or rollout.vllm.sync=auto")
        return "merged", ""
    obstacle = adapter_obstacle(policy)
    if sync == "merged" or (sync == "auto" and whole_tensors and not quantized):
        return "merged", ""
    if obstacle is None:
        return "adapters", ""
    if sync == "adapters" or quantized:
        why = "model.quantize=nf4 pushes the adapters alone" if quantized else "rollout.vllm.sync=adapters"
        raise RlvrError(f"{why}, and vLLM cannot serve this LoRA as adapters: {obstacle}. Use LoRA on the "
                        "decoder's linear layers (model.lora.target_modules)"
                        + ("" if quantized else ", or rollout.vllm.sync=merged"))
    return "merged", (f"note: rollout.vllm.sync=auto pushes the merged weights after each update: vLLM cannot "
                      f"serve {obstacle} as adapters")


def adapter_items(policy: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The active adapter's LoRA weights under PEFT's saved names ('base_model.model.<module>.lora_A.weight'),
    which vLLM's LoRA loader reads; an FSDP2 shard gathered whole (a collective: every rank calls this)."""
    out = []
    for raw, tensor in policy.state_dict().items():
        m = _LORA.match(strip_wrappers(raw))
        if m is None:
            continue
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out.append((f"base_model.model.{m['module']}.lora_{m['part']}.weight", tensor.detach()))
    if not out:
        raise RlvrError("the policy has no LoRA weights to push: rollout.vllm.sync=adapters needs model.lora.r > 0")
    return out


def write_tensors(target: Path, filename: str, items: list[tuple[str, torch.Tensor]],
                  extra: dict[str, str] | None = None) -> Path:
    """`items` as one safetensors file `filename` (and `extra`'s text files) in directory `target`, which appears
    whole or not at all (written beside it, then renamed). Tensors that share memory (a tied head) are written
    as copies."""
    from safetensors.torch import save_file

    seen, tensors = set(), {}
    for name, t in items:
        t = t.detach().to("cpu").contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        tensors[name] = t.clone() if key in seen else t
        seen.add(key)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        save_file(tensors, str(tmp / filename))
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide it from a server run by another user
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_adapter(policy: torch.nn.Module, target: Path, items: list[tuple[str, torch.Tensor]] | None = None) -> Path:
    """The policy's LoRA adapter as PEFT saves it (adapter_model.safetensors, adapter_config.json) in directory
    `target`, written whole or not at all: what vLLM loads by path (LoRARequest, /v1/load_lora_adapter).
    items: adapter_items(policy) where already gathered."""
    config = adapter_config(policy).to_dict()
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
    return write_tensors(Path(target), ADAPTER_FILE, adapter_items(policy) if items is None else items,
                         {"adapter_config.json": json.dumps(config, indent=2, default=str)})


def dir_bytes(path: Path) -> int:
    """The bytes of the files directly in `path` (what a push wrote)."""
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
