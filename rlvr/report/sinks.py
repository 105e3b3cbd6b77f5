"""Run-directory writers: whole-file writes are atomic (temp file + rename); JSONL lines are appended
with one write each and flushed, so a crash never leaves a half-written summary or config."""
from __future__ import annotations

import copy
import json
import math
import os
import secrets
import shutil
from pathlib import Path

import torch

from rlvr.errors import write_error
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


def _fresh(path: Path, make):
    """make(a new hidden name beside `path`), retried on a name taken. The entry gets the mode a plain open
    or mkdir gives (0666 / 0777 less the umask), not mkstemp's 0600 or mkdtemp's 0700: a run's report,
    summary and model are read by others (a colleague, a web server) as any file the user writes is."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
        try:
            return tmp, make(tmp)
        except FileExistsError:
            continue


def atomic_write_text(path: str | Path, text: str) -> None:
    """UTF-8; a character it cannot encode (a lone surrogate from a model's text) is written as its
    backslash escape rather than failing the write: a model's text must never end a run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        tmp, fd = _fresh(path, lambda t: os.open(t, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):  # a full disk, permissions: one line naming the file
            raise write_error(path, e) from None
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2) + "\n")


def _save_peft(model, path: Path, base: str | None = None) -> None:
    """A LoRA model: its adapter in path/adapter, and a merged full model in path, so a plain
    transformers load (or --model.name=path) gets the trained weights. The merge runs on a copy, so
    the live model keeps its adapters and training can go on. A 4-bit base is saved dequantised (its
    NF4 values in model.dtype) with the adapter merged in. `base`: the adapter's base_model_name_or_path
    (rlvr.models.base_model_path), so PeftModel.from_pretrained and the Hub know what it adapts."""
    model.save_pretrained(path / "adapter")
    if base is not None:
        config = path / "adapter" / "adapter_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}, indent=2))
    # a 4-bit base (model.quantize) is copied as its dequantised values, in model.dtype
    plain = {id(p): torch.nn.Parameter(dequantized(p), requires_grad=False) for p in model.parameters() if is_nf4(p)}
    copy.deepcopy(model, plain).merge_and_unload().save_pretrained(path)


def atomic_save_model(model, tokenizer, path: str | Path, base: str | None = None) -> None:
    """save_pretrained into a temporary sibling, then swap it in: the old copy survives a crash. `base`:
    a LoRA adapter's base model (_save_peft)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, _ = _fresh(path, lambda t: os.mkdir(t, 0o777))
    try:
        try:
            if is_peft(model):
                _save_peft(model, tmp, base)
            else:
                model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        except Exception as e:  # noqa: BLE001 - OSError, or safetensors' own error for the same full disk
            if isinstance(e, OSError) or type(e).__name__ == "SafetensorError":
                raise write_error(path, e) from None
            raise
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
    """Appends one JSON line per record with one unbuffered write: a line is on disk (or cut short, which
    a resume drops) when write returns, and a failed write (a full disk) leaves nothing buffered to fail
    again at close; it is raised as one line naming the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise write_error(self.path, e) from None

    def write(self, record: dict) -> None:
        data = memoryview((json.dumps(_clean(record)) + "\n").encode("ascii"))  # json.dumps escapes the rest
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def jsonl_records(path: str | Path):
    """(line number, line, record) for each non-empty line of a JSONL file; record is None for a line
    that is not a JSON object in UTF-8 (one a crash cut short: a kill mid-write, a full disk)."""
    for n, raw in enumerate(Path(path).read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            yield n, raw.decode("utf-8", "replace"), None
            continue
        yield n, line, record if isinstance(record, dict) else None


class NullWriter:
    """A JsonlWriter that writes nothing: the sinks of the ranks that do not own the run directory."""

    def write(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass
