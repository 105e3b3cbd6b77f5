"""Files in and out, below every package that writes or loads one: whole-file writes that are atomic
(temp file + rename: a crash never leaves a half-written summary, config or model) and loading a user's
callable from 'module:function' or 'path/to/file.py:function'."""
from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import secrets
import shutil
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rlvr.errors import RlvrError, write_error

if TYPE_CHECKING:
    from rlvr.saved_model import TrainedFrom


def json_safe(value):
    """JSON has no NaN or inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
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
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2) + "\n")


def _save_peft(model, path: Path, base: str | None = None):
    """A LoRA model: its adapter in path/adapter, and a merged full model in path, so a plain
    transformers load (or --model.name=path) gets the trained weights. The merge runs on a copy, so
    the live model keeps its adapters and training can go on. A 4-bit base is saved dequantised (its
    NF4 values in model.dtype) with the adapter merged in. `base`: the adapter's base_model_name_or_path
    (rlvr.models.base_model_path), so PeftModel.from_pretrained and the Hub know what it adapts. Returns
    the merged model's dtype."""
    import torch

    from rlvr.nf4 import dequantized, is_nf4

    model.save_pretrained(path / "adapter")
    if base is not None:
        config = path / "adapter" / "adapter_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}, indent=2))
    # a 4-bit base (model.quantize) is copied as its dequantised values, in model.dtype
    plain = {id(p): torch.nn.Parameter(dequantized(p), requires_grad=False) for p in model.parameters() if is_nf4(p)}
    merged = copy.deepcopy(model, plain).merge_and_unload()
    merged.save_pretrained(path)
    return merged.dtype


def atomic_save_model(model, tokenizer, path: str | Path, trained: TrainedFrom | None = None) -> None:
    """save_pretrained into a temporary sibling, then swap it in: the old copy survives a crash. `trained`:
    the base the model was trained from (model.name, dtype, quantize), recorded beside the weights
    (rlvr.saved_model: rlvr_model.json; a LoRA model's adapter names it as its base and says how to load the
    pair); None for a model that is its own base."""
    # here, not at the top: reading a run (rlvr report, compare) needs no torch
    from rlvr.models.loading import base_model_path
    from rlvr.models.lora import is_peft
    from rlvr.saved_model import write_records

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, _ = _fresh(path, lambda t: os.mkdir(t, 0o777))
    try:
        try:
            with _no_progress_bars():
                if is_peft(model):
                    dtype = _save_peft(model, tmp, base_model_path(trained.name) if trained else None)
                else:
                    model.save_pretrained(tmp)
                    dtype = model.dtype
            tokenizer.save_pretrained(tmp)
            if trained is not None:
                write_records(tmp, "merged" if is_peft(model) else "full", dtype, trained)
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


@contextlib.contextmanager
def _no_progress_bars():
    """transformers draws a "Writing model shards" bar at each save_pretrained, which a run does at every
    final/ and the bars would land between its own lines; off for the save, as the caller had it after."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_callable(spec: str, what: str) -> Callable:
    """'module:function' or 'path/to/file.py:function' (verl's custom_reward_function.path form). A
    module that cannot be imported (a syntax error, an import that raises anything, sys.exit() at its
    top level) is an RlvrError naming the file and line."""
    module_name, _, attr = spec.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).expanduser()
            name = file_module_name(path)
            loader = importlib.util.spec_from_file_location(name, path)
            if loader is None or not path.exists():
                raise ImportError(f"no such file {path}" + ("" if path.is_absolute() else
                                                              f" (in the working directory, {Path.cwd()})"))
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module  # as an import would: dataclasses and pickling look it up there
            try:
                loader.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        else:
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise RlvrError(f"cannot load {what} '{spec}': {e}") from None
    except SyntaxError as e:
        raise RlvrError(f"cannot load {what} '{spec}': {e.filename}, line {e.lineno}: SyntaxError: {e.msg}") from None
    except BaseException as e:  # noqa: BLE001 - whatever the module's top level raised (SystemExit included)
        if isinstance(e, KeyboardInterrupt) and not _raised_by_code(e):
            raise
        raise RlvrError(f"cannot load {what} '{spec}': importing it raised {type(e).__name__}: {e} "
                        f"({raised_at(e)})") from None
    fn = getattr(module, attr, _MISSING)
    if fn is _MISSING:  # a misspelt name: say what the module does define, nearest first
        defined = defined_functions(module)
        near = difflib.get_close_matches(attr, defined, n=1, cutoff=0.5)
        raise RlvrError(f"cannot load {what} '{spec}': {module_name} has no '{attr}'"
                        + (f"; did you mean '{near[0]}'?" if near else "")
                        + (f" (it defines {', '.join(defined[:12])}{', ...' if len(defined) > 12 else ''})"
                           if defined else ""))
    if not callable(fn):
        raise RlvrError(f"{what} '{spec}' is not callable")
    return fn


_MISSING = object()


def defined_functions(module) -> list[str]:
    """The public functions and classes a module defines itself (not those it imports), sorted."""
    return sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                  and getattr(v, "__module__", None) == module.__name__)


def file_module_name(path: Path) -> str:
    """The name a user's .py file is loaded under: its stem, as an import would name it, unless that names
    another module (a copy of verl's reward_score/math.py is no stand-in for the standard library's math,
    which transformers imports after it; a math_verify.py wrapper imports the real math_verify package):
    then a private name made from its path, the same in every process (the isolated reward worker)."""
    stem = path.stem
    if stem.isidentifier():
        loaded = sys.modules.get(stem)
        try:
            spec = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec(stem)
        except (ImportError, ValueError):  # a broken package of that name: keep clear of it too
            loaded, spec = True, None
        origin = getattr(spec, "origin", None)
        if (loaded is None and spec is None) or (origin and Path(origin).resolve() == path.resolve()):
            return stem  # free, or this very file loaded before
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    return "rlvr_user_file_" + re.sub(r"\W", "_", stem) + "_" + digest


def _raised_by_code(e: BaseException) -> bool:
    """A KeyboardInterrupt raised by a statement (`raise KeyboardInterrupt`), not by a Ctrl-C."""
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and "raise" in (tb[-1].line or "")


def raised_at(e: BaseException) -> str:
    """'FILE, line N, in FUNCTION': where an exception was raised (its traceback's innermost frame)."""
    tb = traceback.extract_tb(e.__traceback__)
    return f"{tb[-1].filename}, line {tb[-1].lineno}, in {tb[-1].name}" if tb else "no traceback"
