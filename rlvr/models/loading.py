"""Load a policy and its tokenizer: built-in names, local Hugging Face directories, Hub names (org/name,
through the Hugging Face cache: rlvr/hub.py), a run's checkpoint, tiny random models."""
from __future__ import annotations

from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.hub import is_hub_name, snapshot
from rlvr.models.dtypes import checkpoint_dtype, weight_dtype
from rlvr.models.gguf import SMOLLM2, prepare_smollm2
from rlvr.models.lora import apply_lora
from rlvr.models.tiny import RANDOM, TINY, random_shape, tiny_random

BUILTINS = (SMOLLM2, TINY)


def load_model(name: str, dtype: str = "float32", device: torch.device | str = "cpu", quantize: str = "none"):
    """Return (model, tokenizer) for a built-in name, a local model directory or a Hub name, the model on `device`
    (a resolved train.device: rlvr.device.resolve_device), its weights in `dtype` (model.dtype: float32,
    bfloat16, or auto: weight_dtype). quantize nf4 (model.quantize): the linear layers' weights 4-bit
    (rlvr/nf4.py), the model read on the host and quantised layer by layer onto `device`."""
    device = torch.device(device)
    if quantize == "nf4" and not name.startswith(RANDOM):
        from rlvr.nf4 import quantize_base

        model, tok = load_model(name, dtype, "cpu")
        quantize_base(model, device)
        if device.type == "cpu":
            own_memory(model)
        return model.to(device), tok
    if name == TINY:
        model, tok = tiny_random()
        return model.to(device=device, dtype=weight_dtype(dtype, None, device)), tok
    if name.startswith(RANDOM):
        return random_shape(name.removeprefix(RANDOM), dtype, device, quantize)
    if name == SMOLLM2:
        return _load_dir(prepare_smollm2(), dtype, device)
    check_model_name(name)
    path = Path(name).expanduser()
    if path.is_dir():
        return _load_dir(path, dtype, device)
    if path.is_file() and path.suffix == ".pt":
        return checkpoint_policy(path, dtype, device)
    return _load_dir(snapshot(name, "model"), dtype, device)  # org/name: the Hugging Face cache, else a download


def check_model_name(name: str) -> None:
    """The error load_model gives for a name that names no model here, raised without loading anything, so a
    command says a missing model before it reads its data (arguments in the order a user reads them). A Hub
    name (org/name) passes: whether it is cached or can be downloaded is load_model's to say."""
    if name in BUILTINS or name.startswith(RANDOM):
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and (path / "config.yaml").is_file():
            raise RlvrError(_run_dir_is_no_model(path))
        if not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
            merged = (f"; the merged model saved with it is {path.parent}"
                      if (path.parent / "config.json").is_file() else "")
            raise RlvrError(f"{path} is a LoRA adapter, not a model (rlvr eval loads it on its base){merged}")
        if not (path / "config.json").is_file():
            raise RlvrError(f"model directory {path} has no config.json: is it a Hugging Face model directory?")
        return
    if (path.is_file() and path.suffix == ".pt") or is_hub_name(name):
        return
    if "/" in name or name.startswith(".") or path.suffix:
        raise RlvrError(f"model directory not found: {name}")
    raise RlvrError(f"unknown model '{name}': use a local model directory, a Hugging Face Hub name (org/name) or "
                    f"a built-in name ({', '.join(BUILTINS)})")


def _run_dir_is_no_model(path: Path) -> str:
    """What to say when a run directory is given as a model: where its model is."""
    from rlvr.checkpoint_files import latest_checkpoint

    if (path / "final" / "config.json").is_file():
        return f"{path} is an rlvr run directory, not a model: its trained model is {path / 'final'}"
    newest = latest_checkpoint(path)
    return (f"{path} is an rlvr run directory, not a model, and has no final/ yet: "
            + (f"its newest checkpoint loads as one, {newest}" if newest else "nor any checkpoint"))


def checkpoint_policy(path: Path, dtype: str = "float32", device: torch.device | str = "cpu"):
    """(model, tokenizer) of a checkpoint rlvr train wrote (RUN_DIR/checkpoints/step_N.pt): the run's model
    (its config.yaml's model section) with the checkpoint's policy weights, a LoRA run's adapters merged into
    the base (a 4-bit base dequantised first), as final/ holds them; then in `dtype` on `device`. So a run
    stopped before its end, or any step of one, is evaluated or trained on as its final/ would be."""
    from types import SimpleNamespace

    import yaml

    from rlvr.nf4 import dequantize_base
    from rlvr.checkpoint_files import load_checkpoint

    config = path.parent.parent / "config.yaml"
    if path.parent.name != "checkpoints" or not config.is_file():
        raise RlvrError(f"{path} is not a checkpoint of an rlvr run (no {config}): a .pt model is a run's "
                        f"RUN_DIR/checkpoints/step_N.pt")
    # the model section of the run's config.yaml, which the run wrote resolved (every key, paths absolute)
    try:
        section = yaml.safe_load(config.read_text())["model"]
        m = SimpleNamespace(name=section["name"], dtype=section["dtype"], quantize=section["quantize"],
                            lora=SimpleNamespace(**section["lora"]))
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        raise RlvrError(f"{config}: no model section an rlvr run writes ({type(e).__name__}: {e})") from None
    model, tok = load_model(m.name, m.dtype, "cpu", m.quantize)
    if m.lora.r > 0:
        model = apply_lora(model, m.lora)
    try:
        model.load_state_dict(load_checkpoint(path)["policy"])
    except RuntimeError as e:  # the run's config.yaml was edited since: another model or LoRA setting
        raise RlvrError(f"checkpoint {path} does not fit the model its run's {config} names ({m.name}, "
                        f"model.lora.r={m.lora.r}): {str(e).splitlines()[0]}") from None
    if m.lora.r > 0:
        dequantize_base(model)
        model = model.merge_and_unload()
    model.config._name_or_path = str(path.resolve())  # what it came from (a LoRA adapter on it names it)
    stored = str(next(model.parameters()).dtype).removeprefix("torch.")
    return model.to(device=torch.device(device), dtype=weight_dtype(dtype, stored, torch.device(device))), tok


@torch.no_grad()
def own_memory(model: torch.nn.Module) -> None:
    """Copy the full-precision tensors the 4-bit quantisation left (embeddings, norms, the head) out of the
    checkpoint's file: safetensors maps the file and the loaded tensors are views of it, so while one of them
    lives the whole mapping does, and every page the quantisation read (all of the fp32 linear weights)
    stays in the process's resident set. On a GPU, .to(device) makes these copies anyway."""
    for t in [*model.parameters(), *model.buffers()]:
        if type(t).__name__ != "NF4Tensor":
            t.data = t.data.clone()


def base_model_path(name: str) -> str | None:
    """What a LoRA adapter's base_model_name_or_path should say for model.name `name`: a name
    from_pretrained loads (a Hub name, a local directory made absolute, the built-in SmolLM2's converted
    copy), or a run's checkpoint made absolute (step_N.pt: load_model reads it, from_pretrained does not);
    None for tiny-random, built in code."""
    if name == TINY:
        return None
    if name == SMOLLM2:
        return str(prepare_smollm2())
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() or path.suffix == ".pt" else name


# the files a Hugging Face tokenizer is saved as (fast, sentencepiece, BPE): a directory with none has none
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "vocab.json")


def _load_dir(path: Path, dtype: str, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = weight_dtype(dtype, checkpoint_dtype(path), device)
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        # transformers' own error here is about sentencepiece and tiktoken, which the user need not install
        raise RlvrError(f"model directory {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
                        f"save the base model's tokenizer beside the weights, "
                        f"AutoTokenizer.from_pretrained(BASE).save_pretrained('{path}')")
    try:
        tok = AutoTokenizer.from_pretrained(path)
        if torch.device(device).type == "cpu":
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        else:  # read straight onto the GPU: no full copy in host memory first (1.7B in fp32: 7 GB and 5-15 s)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, device_map=str(torch.device(device)))
    except Exception as e:  # noqa: BLE001 - a damaged file's error from transformers or safetensors names no path
        raise RlvrError(f"model directory {path} cannot be loaded: {_damaged_file(path) or f'{type(e).__name__}: {e}'}"
                        ) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def _damaged_file(path: Path) -> str | None:
    """The first weights file of a model directory whose header or size is wrong (a copy cut short),
    said in words, or None when each opens and holds the bytes its header promises."""
    from safetensors import safe_open

    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(f, "pt"):  # opening checks the header against the file's size
                pass
        except Exception as e:  # noqa: BLE001
            return f"{f} is damaged or cut short ({e})"
    return None


def stop_token_ids(model, tok) -> list[int]:
    """Token ids that end a completion: the tokenizer's eos plus the generation config's."""
    ids = {tok.eos_token_id}
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(eos)
    return sorted(i for i in ids if i is not None)
