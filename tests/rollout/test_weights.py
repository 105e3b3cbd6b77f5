"""The adapter push's files and choice (rlvr/rollout/weights.py), without vLLM: what is written is PEFT's own format
(PEFT loads it back to the same outputs), holds the adapters alone, and appears whole; rollout.vllm.sync resolves
to adapters where vLLM's LoRA serves them and to merged weights, with a note naming why, where it cannot."""
import json

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import LoraConfig
from rlvr.errors import RlvrError
from rlvr.models import apply_lora, tiny_random
from rlvr.rollout.weights import (adapter_obstacle, adapter_rank, resolve_sync, vllm_lora_rank, write_adapter)


def lora_policy(**kw):
    policy = apply_lora(tiny_random(seed=0)[0], LoraConfig(**{"r": 4, **kw}))
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at zero: move it so the adapter changes the outputs
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    return policy.eval()


def test_write_adapter_is_peft_format_with_the_adapters_alone(tmp_path):
    from peft import PeftModel

    policy = lora_policy(alpha=8, target_modules=["q_proj", "v_proj"])
    out = write_adapter(policy, tmp_path / "a" / "v1")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["v1"]  # no temporary directory left
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    tensors = load_file(str(out / "adapter_model.safetensors"))
    # 2 layers x 2 modules x (A, B): nothing of the base
    assert len(tensors) == 8 and all(".lora_A.weight" in n or ".lora_B.weight" in n for n in tensors)
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in tensors
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], sorted(config["target_modules"])) == (4, 8, ["q_proj", "v_proj"])
    # PEFT reads it back onto a fresh base: the same outputs as the trained policy
    loaded = PeftModel.from_pretrained(tiny_random(seed=0)[0], str(out)).eval()
    ids = torch.tensor([[5, 9, 14, 3, 7]])
    with torch.no_grad():
        want, got = policy(ids).logits, loaded(ids).logits
        with policy.disable_adapter():
            base = policy(ids).logits
    assert torch.allclose(got, want, atol=1e-6) and not torch.allclose(base, want, atol=1e-3)


def test_adapters_are_tens_of_times_smaller_than_the_merged_weights(tmp_path):
    from rlvr.rollout.vllm_server import write_weights
    from rlvr.rollout.weights import dir_bytes, policy_weight_items

    policy = lora_policy()
    adapters = dir_bytes(write_adapter(policy, tmp_path / "a"))
    merged = dir_bytes(write_weights(policy_weight_items(policy), tmp_path / "m"))
    # tiny-random (hidden 64, 2 layers, vocab 100): four 64x64 modules get r=4 A and B: 2*4*(4*64+4*64) floats
    assert adapters - len((tmp_path / "a" / "adapter_config.json").read_bytes()) == pytest.approx(4 * 4096, abs=2048)
    assert merged > 5 * adapters


def test_vllm_lora_rank_is_its_smallest_choice_that_holds_the_rank():
    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 300, 512)] == [1, 8, 8, 16, 320, 512]


def test_sync_resolves_to_adapters_where_vllm_serves_them():
    policy = lora_policy(target_modules="all-linear")
    assert adapter_obstacle(policy) is None and adapter_rank(policy) == 4
    assert resolve_sync("auto", policy, quantized=False) == ("adapters", "")
    assert resolve_sync("merged", policy, quantized=False) == ("merged", "")
    assert resolve_sync("auto", policy, quantized=False, whole_tensors=True) == ("merged", "")  # nccl
    assert resolve_sync("auto", policy, quantized=True, whole_tensors=True) == ("adapters", "")
    plain = tiny_random(seed=0)[0]  # no LoRA: every weight
    assert resolve_sync("auto", plain, quantized=False) == ("merged", "")
    with pytest.raises(RlvrError, match="rollout.vllm.sync=adapters pushes LoRA adapters, and this policy has none"):
        resolve_sync("adapters", plain, quantized=False)


def test_lora_vllm_cannot_serve_is_pushed_merged_with_a_note_or_refused_naming_why():
    head = lora_policy(target_modules=["q_proj", "lm_head"])
    assert adapter_obstacle(head) == "LoRA on the output head ('lm_head')"
    kind, note = resolve_sync("auto", head, quantized=False)
    assert kind == "merged" and note == ("note: rollout.vllm.sync=auto pushes the merged weights after each update: "
                                         "vLLM cannot serve LoRA on the output head ('lm_head') as adapters")
    with pytest.raises(RlvrError, match=r"rollout.vllm.sync=adapters, and vLLM cannot serve this LoRA as adapters: "
                                        r"LoRA on the output head .*or rollout.vllm.sync=merged"):
        resolve_sync("adapters", head, quantized=False)
    with pytest.raises(RlvrError, match="model.quantize=nf4 pushes the adapters alone, and vLLM cannot serve"):
        resolve_sync("auto", head, quantized=True)
    embedding = lora_policy(target_modules=["embed_tokens"])
    assert adapter_obstacle(embedding) == "LoRA on the embeddings ('model.embed_tokens')"
    from peft import LoraConfig as PeftLora, get_peft_model

    dora = get_peft_model(tiny_random(seed=0)[0], PeftLora(r=4, target_modules=["q_proj"], use_dora=True))
    assert adapter_obstacle(dora) == "DoRA (vLLM does not serve it)"
    big = get_peft_model(tiny_random(seed=0, hidden=128)[0], PeftLora(r=8, target_modules=["q_proj"],
                                                                     rank_pattern={"layers.1": 600}))
    assert adapter_rank(big) == 600 and adapter_obstacle(big) == "rank 600 (vLLM serves ranks up to 512)"
