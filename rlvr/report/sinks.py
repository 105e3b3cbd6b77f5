"""Run-directory writers: whole-file writes are atomic (temp file + rename); JSONL lines are appended
with one write each and flushed, so a crash never leaves a half-written summary or config."""
from __future__ import annotations

import copy
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import torch

from rlvr.models import is_peft
from rlvr.nf4 import dequantized, is_nf4


def _clean(value):
    """JSON has no NaN or inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def atomic_write_text(path: str | Path, text: str) -> None:
    """UTF-8; a character it cannot encode (a lone surrogate from a model's text) is written as its
    backslash escape rather than failing the write: a model's text must never end a run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2) + "\n")


def _save_peft(model, path: Path) -> None:
    """A LoRA model: its adapter in path/adapter, and a merged full model in path, so a plain
    transformers load (or --model.name=path) gets the trained weights. The merge runs on a copy, so
    the live model keeps its adapters and training can go on. A 4-bit base is saved dequantised (its
    NF4 values in model.dtype) with the adapter merged in."""
    model.save_pretrained(path / "adapter")
    # a 4-bit base (model.quantize) is copied as its dequantised values, in model.dtype
    plain = {id(p): torch.nn.Parameter(dequantized(p), requires_grad=False) for p in model.parameters() if is_nf4(p)}
    copy.deepcopy(model, plain).merge_and_unload().save_pretrained(path)


def atomic_save_model(model, tokenizer, path: str | Path) -> None:
    """save_pretrained into a temporary sibling, then swap it in: the old copy survives a crash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        if is_peft(model):
            _save_peft(model, tmp)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class JsonlWriter:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="ascii")   # json.dumps escapes every other character

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(_clean(record)) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NullWriter:
    """A JsonlWriter that writes nothing: the sinks of the ranks that do not own the run directory."""

    def write(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass
