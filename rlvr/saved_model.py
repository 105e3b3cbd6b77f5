"""What a model rlvr saved is, written beside it, and loading a model as it was saved (rlvr eval).

A run's final/ (and `rlvr sft`'s) holds RECORD, rlvr_model.json: its `form` (full: every weight trained;
merged: LoRA adapters merged into the base), the `dtype` its tensors are stored in, `quantize` (none: the
weights are plain, and load as they are), and what it was trained from: the `base` model (a name load_model
reads), `base_dtype` (model.dtype as the run had it) and `base_quantize` (model.quantize). A LoRA run's
final/adapter/ holds a record of its own (form adapter) and a README.md (its Hub model card) that says which
base the adapter was trained on and how to load the pair.

Why it matters for QLoRA (model.quantize=nf4): the adapters were trained on the base's NF4-rounded weights,
and final/ holds those weights dequantised with the adapters merged in. Quantising final/ again rounds the
trained weights a second time (a different model), and the adapter on the full-precision base it names is
nearly that base (its update is small against the rounding it was trained around). The pair that gives
final/ back is the base quantised to NF4 and dequantised, plus the adapter: `load_adapter` does that.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.dtypes import DTYPES, weight_dtype
from rlvr.models.loading import BUILTINS, base_model_path, check_model_name, load_model
from rlvr.models.tiny import RANDOM

RECORD = "rlvr_model.json"
ADAPTER = "adapter"  # a LoRA run's adapter alone, inside final/
FORMS = ("full", "merged", "adapter")


@dataclass(frozen=True)
class TrainedFrom:
    """The base a saved model was trained from: model.name, model.dtype and model.quantize as the run had them."""

    name: str
    dtype: str = "float32"
    quantize: str = "none"


def loadable(name: str) -> str:
    """model.name as load_model reads it from anywhere: built-in and random: names and Hub names as they are,
    a local directory or checkpoint made absolute."""
    if name in BUILTINS or name.startswith(RANDOM):
        return name
    return base_model_path(name) or name


def record_of(form: str, dtype: torch.dtype, trained: TrainedFrom) -> dict:
    """The RECORD of a saved model (the module docstring): `dtype` the dtype its tensors are saved in."""
    record = {"form": form, "dtype": str(dtype).removeprefix("torch."), "quantize": "none",
              "base": loadable(trained.name), "base_dtype": trained.dtype, "base_quantize": trained.quantize}
    if form == "merged":
        record["adapter"] = ADAPTER
    if trained.quantize != "none":
        record["note"] = (f"the adapters were trained on the base quantised to {trained.quantize}; "
                          + ("this model is that quantised base, dequantised, with the adapters merged: load it "
                             "as it is, unquantised" if form == "merged" else
                             "on the full-precision base this adapter is nearly the base: load it on the base "
                             f"quantised to {trained.quantize} and dequantised (rlvr eval --model DIR does)"))
    return record


def adapter_card(trained: TrainedFrom, dtype: str) -> str:
    """final/adapter/README.md: the Hub model card PEFT writes empty, with the base the adapter was trained
    on and how to load the pair that gives the merged model (final/) back."""
    base = loadable(trained.name)
    hub_base = base_model_path(trained.name) or ""
    head = (f"---\nbase_model: {json.dumps(hub_base)}\nlibrary_name: peft\npipeline_tag: text-generation\n"
            f"tags:\n- lora\n- rlvr\n---\n\n# LoRA adapter trained by rlvr\n\n"
            f"Base model: `{base}` (model.name), in {dtype}. The merged model (the adapter merged into the base "
            f"it was trained on) is the directory above this one; it loads with transformers alone.\n\n")
    if trained.quantize == "none":
        return head + ("Load the pair with PEFT:\n\n```python\nfrom peft import PeftModel\n"
                       "from transformers import AutoModelForCausalLM\n\n"
                       f"model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({base!r}), "
                       "'final/adapter')\n```\n\nor `rlvr eval --model final/adapter`.\n")
    return head + (
        f"**This adapter was trained on the base quantised to {trained.quantize}** (model.quantize={trained.quantize}: "
        "rlvr/nf4.py, torchao's NF4Tensor, blocks of 64). On the full-precision base that `base_model_name_or_path` "
        "names it is nearly the base model: its update is small against the rounding it was trained around. The pair "
        f"that gives the merged model back is the base quantised to {trained.quantize} and dequantised, plus this "
        "adapter:\n\n```python\nfrom peft import PeftModel\n"
        "from rlvr.models import load_model\nfrom rlvr.nf4 import dequantize_base\n\n"
        f"base, tok = load_model({base!r}, {trained.dtype!r}, 'cpu', {trained.quantize!r})\n"
        "dequantize_base(base)  # the rounded weights, as plain tensors\n"
        "model = PeftModel.from_pretrained(base, 'final/adapter').merge_and_unload()\n```\n\n"
        "Without rlvr: torchao's `to_nf4(w, 64, math.gcd(w.numel() // 64, 256))` of the weight `w` of every linear "
        "layer but the output head, then `.get_original_weight()`, before PeftModel.from_pretrained.\n\n"
        "`rlvr eval --model final/adapter` loads it so; the merged model (the directory above) is the same model "
        "already: evaluate or serve that one as it is, unquantised.\n")


def write_records(path: Path, form: str, dtype: torch.dtype, trained: TrainedFrom) -> None:
    """RECORD into the saved model directory `path` (a temporary one, swapped in whole by the caller); for a
    merged model, the adapter's record and model card in path/adapter too."""
    (path / RECORD).write_text(json.dumps(record_of(form, dtype, trained), indent=2) + "\n")
    if form == "merged":
        (path / ADAPTER / RECORD).write_text(json.dumps(record_of("adapter", dtype, trained), indent=2) + "\n")
        (path / ADAPTER / "README.md").write_text(adapter_card(trained, str(dtype).removeprefix("torch.")))


def read_record(name: str) -> dict | None:
    """The RECORD of model directory `name`; None where it has none (a model rlvr did not save, or saved
    before records were written). One that does not read is an error naming the file."""
    path = Path(name).expanduser() / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if record["form"] not in FORMS:
            raise ValueError(f"form {record['form']!r} is not one of {', '.join(FORMS)}")
        if record["dtype"] not in DTYPES or not isinstance(record["base"], str):
            raise ValueError(f"dtype {record['dtype']!r} is not one of {', '.join(DTYPES)}, or base is no name")
        return record
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RlvrError(f"{path}: not a record rlvr writes ({type(e).__name__}: {e}); delete it to load the "
                        "directory as a plain Hugging Face model") from None


def is_adapter_dir(name: str) -> bool:
    """A PEFT adapter directory: adapter_config.json and no model of its own."""
    path = Path(name).expanduser()
    return (path / "adapter_config.json").is_file() and not (path / "config.json").is_file()


def check_saved_name(name: str) -> None:
    """check_model_name, an adapter directory passing too (load_as_saved loads it on its base)."""
    if not is_adapter_dir(name):
        check_model_name(name)


def load_as_saved(name: str, device: torch.device | str, *, dtype: str | None = None, quantize: str | None = None,
                  default_dtype: str = "float32"):
    """(model, tokenizer, how): `name` loaded as it was saved. A directory with a RECORD in its stored dtype,
    unquantised; an adapter directory merged onto the base it was trained on (load_adapter); anything else
    (a built-in, Hub or local name, a run's checkpoint) in `default_dtype` (the config's model.dtype),
    unquantised. `dtype` and `quantize`, when given (the user asked on the command line), apply to every model
    alike. `how`: what was loaded, in words, for the console."""
    record = read_record(name)
    if is_adapter_dir(name):
        model, tok, how = load_adapter(Path(name).expanduser(), record, device, dtype, default_dtype)
        if quantize not in (None, "none"):
            from rlvr.nf4 import quantize_base

            quantize_base(model, device)
            how += f", then quantised to {quantize} (--model.quantize)"
        return model, tok, how
    use = dtype or (record["dtype"] if record else default_dtype)
    model, tok = load_model(name, use, device, quantize or "none")
    form = {"full": "a full fine-tune", "merged": "LoRA adapters merged into their base"}.get(
        record["form"] if record else "", "")
    stored = f"{form}, saved in {record['dtype']}: " if record else ""
    return model, tok, stored + (f"loaded in {use}, quantised to {quantize} (--model.quantize)" if quantize not in
                                 (None, "none") else f"loaded in {use}, unquantised")


def load_adapter(path: Path, record: dict | None, device: torch.device | str, dtype: str | None = None,
                 default_dtype: str = "float32"):
    """(model, tokenizer, how): the LoRA adapter at `path` merged onto the base in the form it was trained on.
    With a RECORD (rlvr's): the base loaded as the run loaded it (base_dtype, base_quantize, on `device`), a
    4-bit base dequantised, the adapter merged (as rlvr.io made final/), in the record's dtype. Without
    (another trainer's adapter): the base its adapter_config.json names, in `default_dtype`, unquantised.
    `dtype`, when given, is the merged model's dtype instead."""
    from rlvr.nf4 import dequantize_base

    try:
        from peft import PeftModel
    except ImportError as e:
        raise RlvrError(f"{path} is a LoRA adapter, which needs the peft package: pip install 'rlvr[lora]' (or "
                        f"evaluate the merged model beside it, {path.parent})") from e
    if record is not None:
        base, base_dtype, quantize = record["base"], record.get("base_dtype", record["dtype"]), \
            record.get("base_quantize", "none")
    else:
        config = path / "adapter_config.json"
        try:
            base = json.loads(config.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError) as e:
            raise RlvrError(f"{config} cannot be read: {e}") from None
        if not isinstance(base, str) or not base:
            raise RlvrError(f"{config} names no base model (base_model_name_or_path): load the adapter on its base "
                            f"yourself, or evaluate the merged model saved with it")
        base_dtype, quantize = default_dtype, "none"
    check_model_name(base)
    model, tok = load_model(base, base_dtype, device, quantize)
    dequantize_base(model)
    model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    stored = str(model.dtype).removeprefix("torch.")
    target = weight_dtype(dtype or (record["dtype"] if record is not None else stored), stored, torch.device(device))
    name = str(target).removeprefix("torch.")
    how = (f"the adapter merged onto {base} as it was trained on ({quantize}, dequantised), in {name}"
           if quantize != "none" else f"the adapter merged onto {base}, in {name}")
    return model.to(dtype=target), tok, how
