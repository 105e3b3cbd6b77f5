"""LoRA adapters pushed to a colocated vLLM for real (rollout.vllm.sync adapters), on vLLM's CPU platform, with
SmolLM2-135M-Instruct in float32: vLLM holds the base it loaded and serves the trainer's adapter, its greedy outputs
equal the trainer's and its log-probs match to float32 rounding, a new push replaces the adapter, and a push is
more than ten times smaller than the merged weights. Server mode with adapters: test_vllm_lora_server.py.

Runs in the vLLM venv (`make vllm`; `make test` runs `pytest -m vllm` there): skipped where vllm is not installed.
"""
import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="needs vLLM: make vllm, then make test (or .venv-vllm/bin/python -m pytest -m vllm THIS_FILE)")]

from tests.rollout.test_vllm_real import TEMPERATURE, mismatch  # noqa: E402

RANK = 8


def move_adapters(policy, seed: int, std: float = 0.05) -> None:
    """LoRA's B starts at zero (the adapter changes nothing): draw it, so the adapter's effect is seen."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, std)


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    from rlvr.config import build_config
    from rlvr.models import apply_lora, load_model, stop_token_ids
    from rlvr.rollout.vllm_engine import make_vllm_engine
    from rlvr.train.settings import engine_settings

    cfg = build_config(None, ["--model.name=smollm2-135m-instruct", "--rollout.engine=vllm", f"--model.lora.r={RANK}",
                              "--model.lora.target_modules=all-linear", "--rollout.vllm.max_model_len=384",
                              "--rollout.vllm.kv_cache_gib=0.25"])
    policy, tok = load_model(cfg.model.name)
    policy = apply_lora(policy, cfg.model.lora)
    move_adapters(policy, seed=0)
    policy.eval()
    torch.set_num_threads(1)  # and so vLLM's OpenMP threads (test_vllm_real.py says why)
    workdir = tmp_path_factory.mktemp("vllm")
    engine = make_vllm_engine(engine_settings(cfg), policy, workdir)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in ("What is 7 + 5?", "Name a colour.")]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    sampling = dict(group_size=3, max_new_tokens=12, temperature=TEMPERATURE, top_p=1.0, top_k=0,
                    stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id)
    return engine, policy, tok, prompts, sampling, workdir


def base_mismatch(policy, rollout, pad_id) -> float:
    with policy.disable_adapter():
        return mismatch(policy, rollout, pad_id)


def test_vllm_serves_the_trainers_adapter_on_its_own_base(colocated):
    from rlvr.rollout.builtin import generate

    engine, policy, tok, prompts, sampling, workdir = colocated
    lora = engine.llm.llm_engine.vllm_config.lora_config
    assert (lora.max_lora_rank, lora.max_loras) == (RANK, 1)
    assert engine.weights_version == 1 and engine.lora.lora_int_id == 1  # pushed once at start
    assert [p.name for p in (workdir / "vllm-adapters").iterdir()] == ["v1"]
    greedy = {**sampling, "group_size": 1, "temperature": 0.0}
    with torch.no_grad():
        trainer = generate(policy, prompts, seeds=[1, 2], **greedy).completion_ids
    assert torch.equal(engine.generate(prompts, seeds=[1, 2], **greedy).completion_ids, trainer)
    sampled = engine.generate(prompts, seeds=[11, 12], **sampling)
    adapted, base = mismatch(policy, sampled, tok.pad_token_id), base_mismatch(policy, sampled, tok.pad_token_id)
    print(f"mismatch with the adapter {adapted:.2e}, against the base alone {base:.3f} nats/token")
    assert adapted < 1e-4  # fp32 on both sides
    assert base > 1e-2  # the adapter is what vLLM applied: the base alone is far off


def test_a_new_push_replaces_the_adapter(colocated):
    engine, policy, tok, prompts, sampling, workdir = colocated
    original = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}
    try:
        move_adapters(policy, seed=1)
        stale = mismatch(policy, engine.generate(prompts, seeds=[1, 2], **sampling), tok.pad_token_id)
        engine.sync_weights(policy)
        synced = mismatch(policy, engine.generate(prompts, seeds=[1, 2], **sampling), tok.pad_token_id)
        print(f"mismatch before the push {stale:.3f}, after {synced:.2e}")
        assert stale > 1e-2 and synced < 1e-4
        assert engine.weights_version == 2 and engine.llm.llm_engine.list_loras() == {2}  # the old one removed
        assert [p.name for p in (workdir / "vllm-adapters").iterdir()] == ["v2"]
    finally:
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if n in original:
                    p.copy_(original[n])
        engine.sync_weights(policy)


def test_an_adapter_push_is_more_than_ten_times_smaller_than_the_merged_weights(colocated):
    from rlvr.rollout.weights import policy_weight_items

    engine, policy, *_ = colocated
    adapters = engine.sync_weights(policy)
    merged = sum(t.numel() * t.element_size() for _, t in policy_weight_items(policy))  # what sync=merged hands over
    print(f"sync bytes: adapters {adapters}, merged {merged}, ratio {merged / adapters:.1f}")
    # SmolLM2-135M, every linear layer of its 30 layers with r=8 adapters: 30 x 8 x (q 1152 + k 768 + v 768 + o 1152
    # + gate 2112 + up 2112 + down 2112) = 2.44M fp32 parameters, against 135M (and the tied head sent again)
    assert merged >= 10 * adapters
    assert adapters == pytest.approx(4 * 2_442_240, rel=0.01)
