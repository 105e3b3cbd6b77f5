"""rlvr/saved_model.py: a saved model's record of its form, its adapter's card, and loading each as it was saved
(the whole runs through `rlvr eval`: tests/e2e/test_saved_model_runs.py)."""
import json

import pytest
import torch

from rlvr.config import LoraConfig
from rlvr.errors import RlvrError
from rlvr.io import atomic_save_model
from rlvr.models import apply_lora, check_model_name, load_model, tiny_random
from rlvr.nf4 import is_nf4
from rlvr.saved_model import TrainedFrom, load_as_saved

pytest.importorskip("peft")
pytest.importorskip("torchao")

QLORA = TrainedFrom(name="tiny-random", dtype="float32", quantize="nf4")


def adapted(quantize: str):
    """tiny-random (4-bit under nf4) with LoRA adapters whose B is drawn at random, so they change the model
    as trained ones do (a fresh adapter's B is 0)."""
    model, tok = load_model("tiny-random", "float32", "cpu", quantize)
    model = apply_lora(model, LoraConfig(r=4, alpha=8))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model, tok


def weights(model) -> dict[str, torch.Tensor]:
    return dict(model.state_dict())


@pytest.fixture(scope="module")
def qlora_final(tmp_path_factory):
    """A QLoRA model saved as a run saves final/ (rlvr.train.checkpoint.save_final)."""
    final = tmp_path_factory.mktemp("qlora") / "final"
    atomic_save_model(*adapted("nf4"), final, QLORA)
    return final


def test_a_qlora_final_records_that_it_is_merged_plain_and_trained_on_a_4bit_base(qlora_final):
    record = json.loads((qlora_final / "rlvr_model.json").read_text())
    note = record.pop("note")
    assert record == {"form": "merged", "dtype": "float32", "quantize": "none", "base": "tiny-random",
                      "base_dtype": "float32", "base_quantize": "nf4", "adapter": "adapter"}
    assert "load it as it is, unquantised" in note
    adapter = json.loads((qlora_final / "adapter" / "rlvr_model.json").read_text())
    assert {k: adapter[k] for k in ("form", "base", "base_quantize")} == {"form": "adapter", "base": "tiny-random",
                                                                          "base_quantize": "nf4"}
    card = (qlora_final / "adapter" / "README.md").read_text()  # the Hub's model card, where the adapter is
    assert "**This adapter was trained on the base quantised to nf4**" in card
    assert "load_model('tiny-random', 'float32', 'cpu', 'nf4')" in card and "dequantize_base(base)" in card


def test_final_loads_unquantised_and_its_adapter_on_the_rounded_base_is_final_bit_for_bit(qlora_final):
    merged, _, how = load_as_saved(str(qlora_final), "cpu")
    assert how == "LoRA adapters merged into their base, saved in float32: loaded in float32, unquantised"
    assert not any(is_nf4(p) for p in merged.parameters())
    pair, _, how = load_as_saved(str(qlora_final / "adapter"), "cpu")
    assert how == "the adapter merged onto tiny-random as it was trained on (nf4, dequantised), in float32"
    a, b = weights(merged), weights(pair)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the card's warning: the adapter on the full-precision base is another model
    from peft import PeftModel

    plain = PeftModel.from_pretrained(tiny_random()[0], str(qlora_final / "adapter")).merge_and_unload()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(weights(plain)[q], a[q])


def test_4_bits_only_when_asked(qlora_final):
    model, _, how = load_as_saved(str(qlora_final), "cpu", quantize="nf4")
    assert how.endswith("loaded in float32, quantised to nf4 (--model.quantize)")
    assert sum(is_nf4(p) for p in model.parameters()) == 14  # 2 layers x (q, k, v, o, gate, up, down)
    base, _, how = load_as_saved("tiny-random", "cpu")
    assert how == "loaded in float32, unquantised" and not any(is_nf4(p) for p in base.parameters())


def test_another_trainers_adapter_merges_onto_the_base_its_config_names(tmp_path):
    base_dir = tmp_path / "base"
    atomic_save_model(*tiny_random(), base_dir)
    model, tok = adapted("none")
    model.save_pretrained(tmp_path / "adapter")  # PEFT's own save: no rlvr record
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": str(base_dir)}))
    loaded, _, how = load_as_saved(str(tmp_path / "adapter"), "cpu")
    assert how == f"the adapter merged onto {base_dir}, in float32"
    expected = weights(model.merge_and_unload())
    assert all(torch.equal(v, expected[k]) for k, v in weights(loaded).items())
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": None}))
    with pytest.raises(RlvrError, match=f"^{config} names no base model"):
        load_as_saved(str(tmp_path / "adapter"), "cpu")


def test_a_damaged_record_is_named_and_an_adapter_is_no_model_to_train_from(qlora_final, tmp_path):
    import shutil

    final = shutil.copytree(qlora_final, tmp_path / "final")
    (final / "rlvr_model.json").write_text('{"form": "merged", "dtype": "float16"}')
    with pytest.raises(RlvrError, match=f"^{final / 'rlvr_model.json'}: not a record rlvr writes"):
        load_as_saved(str(final), "cpu")
    with pytest.raises(RlvrError, match=f"^{final / 'adapter'} is a LoRA adapter, not a model .*; the merged model "
                                        f"saved with it is {final}$"):
        check_model_name(str(final / "adapter"))
