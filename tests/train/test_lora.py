import sys

import pytest
import torch

from rlvr.config import AlgoConfig, Config, LoraConfig, OptimizerConfig

from rlvr.train.settings import update_settings
from rlvr.errors import RlvrError
from rlvr.models import apply_lora, checkpointing_active, enable_gradient_checkpointing, is_peft, load_model
from rlvr.io import atomic_save_model
from rlvr.rollout.builtin import generate
from rlvr.train.forward import Reference, completion_logprobs, reference_logprobs
from rlvr.train.batch import Batch
from rlvr.train.update import policy_update, reference_forward

LORA = LoraConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])


def rollout_batch(model, tok):
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, -2.0, 2.0])
    return Batch(prompts=prompts, completion_ids=r.completion_ids, completion_mask=r.completion_mask, advantages=adv,
                 group_size=2, sampler_logp=r.sampler_logp)


def settings(tok, **algo):
    cfg = Config(algo=AlgoConfig(**algo), optimizer=OptimizerConfig(micro_batch_prompts=2, max_grad_norm=0.0))
    return update_settings(cfg, tok.pad_token_id, "no")


def logp(model, batch, pad_id):
    return completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, 2, pad_id)


def trained(model, tok, batch, steps=3):
    """LoRA on `model`, trained a few steps with a large learning rate so the adapters matter."""
    peft = apply_lora(model, LORA)
    opt = torch.optim.SGD([p for p in peft.parameters() if p.requires_grad], lr=2.0)
    for _ in range(steps):
        policy_update(peft, opt, batch, settings(tok, iterations=2))
    return peft


def test_only_adapter_weights_train(tiny):
    model, tok = tiny
    peft = apply_lora(model, LORA)
    assert is_peft(peft)
    trainable = {n for n, p in peft.named_parameters() if p.requires_grad}
    # 2 layers x (q, v) x (A, B)
    assert len(trainable) == 8 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    hidden, kv = 64, 64 // 4 * 2  # v_proj out: 2 kv heads x head dim 16
    assert sum(p.numel() for p in peft.parameters() if p.requires_grad) == 2 * (
        4 * hidden + hidden * 4 + 4 * hidden + kv * 4)


def test_applying_lora_prints_no_deprecation_warning_of_peft_s(tiny):
    """PEFT reads transformers' deprecated is_gradient_checkpointing, whose FutureWarning every LoRA run
    printed; no user can act on it, so it is not shown (pytest's own filter hides FutureWarnings: "always"
    here lets one through)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_lora(tiny[0], LORA)
    assert [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)] == []


def test_one_update_changes_only_adapters(tiny):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    peft = apply_lora(model, LORA)
    before = {n: p.detach().clone() for n, p in peft.named_parameters()}
    opt = torch.optim.SGD([p for p in peft.parameters() if p.requires_grad], lr=0.5)
    m = policy_update(peft, opt, batch, settings(tok))
    assert m["skipped_updates"] == 0 and m["grad_norm"] > 0
    for n, p in peft.named_parameters():
        if ".lora_B." in n:  # B starts at 0; A gets no gradient through a zero B on the first step
            assert not torch.equal(p, before[n]), n
        else:
            assert torch.equal(p, before[n]), n


def test_reference_with_adapters_off_is_the_untrained_base(tiny):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    base_logp = logp(model, batch, tok.pad_token_id)
    peft = trained(model, tok, batch)
    assert (logp(peft, batch, tok.pad_token_id) - base_logp).abs().max() > 1e-2  # the adapters matter
    ref = Reference.of(peft)
    assert ref.adapters_off and ref.model is peft  # no second copy
    ref_logp = reference_logprobs(ref, batch.prompts, batch.completion_ids, batch.completion_mask, 2, tok.pad_token_id)
    assert torch.equal(ref_logp, base_logp)
    assert not torch.equal(logp(peft, batch, tok.pad_token_id), base_logp)  # adapters are back on afterwards


def test_kl_to_the_lora_reference_starts_at_zero_and_grows(tiny):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    peft = apply_lora(model, LORA)
    opt = torch.optim.SGD([p for p in peft.parameters() if p.requires_grad], lr=2.0)
    s = settings(tok, beta=0.1)
    first = policy_update(peft, opt, batch, s, reference_forward(Reference.of(peft), batch, s))
    assert first["kl"] == 0.0  # B = 0: policy and base agree exactly
    second = policy_update(peft, opt, batch, s, reference_forward(Reference.of(peft), batch, s))
    assert second["kl"] > 1e-4


def test_shared_prefix_forward_under_peft_equals_full_forward(tiny):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    peft = trained(model, tok, batch)
    shared = logp(peft, batch, tok.pad_token_id)
    for b in range(shared.shape[0]):
        p, n = batch.prompts[b // 2], int(batch.completion_mask[b].sum())
        c = batch.completion_ids[b, :n].tolist()
        full = peft(input_ids=torch.tensor([p + c])).logits[0].log_softmax(-1)  # [T, V]
        expected = torch.stack([full[len(p) + t - 1, c[t]] for t in range(n)])
        assert torch.allclose(shared[b, :n], expected, atol=1e-5)


def test_checkpointing_with_lora_gives_the_same_gradient(tiny):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    peft = trained(model, tok, batch).train()
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_gradient_checkpointing(peft)
        assert checkpointing_active(peft) == checkpointing
        peft.zero_grad()
        logp(peft, batch, tok.pad_token_id).sum().backward()
        grads.append([p.grad.clone() for p in peft.parameters() if p.requires_grad])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)


def test_saved_model_is_adapter_plus_merged_full_model(tiny, tmp_path):
    model, tok = tiny
    batch = rollout_batch(model, tok)
    peft = trained(model, tok, batch)
    x = torch.tensor([tok("12+3=")["input_ids"]])
    with torch.no_grad():
        expected = peft(input_ids=x).logits
    atomic_save_model(peft, tok, tmp_path / "final")
    assert (tmp_path / "final" / "adapter" / "adapter_config.json").is_file()
    merged, _ = load_model(str(tmp_path / "final"))
    assert not is_peft(merged) and not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=x).logits, expected, atol=1e-5)
        assert torch.equal(peft(input_ids=x).logits, expected)  # the live model kept its adapters
    assert any(p.requires_grad for p in peft.parameters())


def test_missing_peft_names_the_extra(tiny, monkeypatch):
    model, _ = tiny
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    with pytest.raises(RlvrError, match=r"pip install 'rlvr\[lora\]'"):
        apply_lora(model, LORA)


def test_unknown_target_module_lists_the_linear_layers(tiny):
    model, _ = tiny
    with pytest.raises(RlvrError, match=r"\['qkv'\] are not modules.*down_proj, gate_proj, k_proj"):
        apply_lora(model, LoraConfig(r=4, target_modules=["q_proj", "qkv"]))


def test_all_linear_targets_every_linear_layer_but_the_head(tiny):
    # PEFT's and TRL's spelling (LoraConfig(target_modules="all-linear")), refused before as 'must be list'
    from rlvr.config import build_config
    from rlvr.config.sections import ConfigError

    cfg = build_config(None, ["--model.lora.r=4", "--model.lora.target_modules=all-linear"])
    assert cfg.model.lora.target_modules == "all-linear"
    model, _ = tiny
    wrapped = apply_lora(model, cfg.model.lora)
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in wrapped.named_parameters() if ".lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # no lm_head
    # r x (in + out) per layer: q 64+64, k and v 64+32, o 64+64, gate and up 64+128, down 128+64; 2 layers
    assert sum(p.numel() for p in wrapped.parameters() if p.requires_grad) == 2 * 4 * (
        2 * 128 + 2 * 96 + 3 * 192) == 8192
    from rlvr.plan import PlanSettings, estimate, shape_of

    s = PlanSettings.of(cfg, "cpu")
    assert s.lora_targets == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert estimate(shape_of("tiny-random"), s).update["optimizer"] == 8 * 8192  # the plan counts the same adapters
    with pytest.raises(ConfigError, match=r"model.lora.target_modules is a list of layer names \(e.g. \[q_proj, "
                                          r"v_proj\]\) or all-linear, got 'q_proj'"):
        build_config(None, ["--model.lora.r=4", "--model.lora.target_modules=q_proj"])
