"""vLLM engine pieces that run without vLLM or a GPU: output conversion, weight naming and LoRA
merging, log-prob mismatch and TIS weights, import guards, and the engine's call order (fake LLM)."""
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import Config
from rlvr.errors import RlvrError
from rlvr.rollout import vllm_engine as ve
from rlvr.train.settings import engine_settings
from rlvr.rollout import weights
from rlvr.rollout.decoding import select_groups


# ---------------------------------------------------------------- outputs -> Rollout

def test_outputs_to_rollout_hand_values():
    prompts = [[1, 2], [4]]
    tokens = [[5, 6, 3], [7, 8, 9, 10], [3], [11, 12]]
    logps = [[-0.1, -0.2, -0.3], [-1.0, -2.0, -3.0, -4.0], [-0.5], [-0.25, -0.75]]
    reasons = ["stop", "length", "stop", "stop"]  # the last stopped on a stop string, not a stop id
    r = ve.outputs_to_rollout(prompts, tokens, logps, reasons, group_size=2, stop_ids=[3], pad_id=0)
    assert r.prompt_ids == [[1, 2], [4]] and r.group_size == 2
    assert r.completion_ids.tolist() == [[5, 6, 3, 0], [7, 8, 9, 10], [3, 0, 0, 0], [11, 12, 0, 0]]
    assert r.completion_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert torch.equal(r.sampler_logp, torch.tensor([[-0.1, -0.2, -0.3, 0], [-1.0, -2.0, -3.0, -4.0],
                                                     [-0.5, 0, 0, 0], [-0.25, -0.75, 0, 0]]))
    assert r.truncated.tolist() == [False, True, False, False]
    assert r.completion_token_lists() == [[5, 6, 3], [7, 8, 9, 10], [3], [11, 12]]
    assert select_groups(r, [1]).completion_ids.tolist() == [[3, 0, 0, 0], [11, 12, 0, 0]]


def test_outputs_to_rollout_ends_at_first_stop_when_pad_is_a_stop():
    # SmolLM2 pads with <|im_end|>, its stop token: the row ends at the first one.
    r = ve.outputs_to_rollout([[9]], [[5, 2, 2], [6, 7]], [[-1.0, -2.0, -9.0], [-1.5, -2.5]], ["stop", "length"],
                              group_size=2, stop_ids=[2, 8], pad_id=2)
    assert r.completion_ids.tolist() == [[5, 2], [6, 7]]
    assert r.completion_mask.tolist() == [[1, 1], [1, 1]]
    assert r.sampler_logp.tolist() == [[-1.0, -2.0], [-1.5, -2.5]]
    assert r.truncated.tolist() == [False, True]
    # A stop token as the last allowed token ends the completion: not truncated, whatever the reason says.
    r = ve.outputs_to_rollout([[9]], [[6, 8]], [[-1.0, -2.0]], ["length"], group_size=1, stop_ids=[2, 8], pad_id=2)
    assert r.truncated.tolist() == [False]


def test_outputs_to_rollout_rejects_wrong_counts():
    with pytest.raises(ValueError, match="expected 4 completions"):
        ve.outputs_to_rollout([[1], [2]], [[3]] * 3, [[-1.0]] * 3, ["stop"] * 3, group_size=2, stop_ids=[3],
                              pad_id=0)
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        ve.outputs_to_rollout([[1]], [[4, 3]], [[-1.0]], ["stop"], group_size=1, stop_ids=[3], pad_id=0)


def _completion(ids, lp_by_pos, reason):
    logprobs = [{tok: SimpleNamespace(logprob=v, rank=1) for tok, v in pos.items()} for pos in lp_by_pos]
    return SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=reason)


def test_request_outputs_to_lists_reads_the_sampled_token():
    # With logprobs=N vLLM adds top-N entries beside the sampled token; the sampled one is taken.
    outs = [SimpleNamespace(outputs=[_completion([5, 3], [{5: -0.7, 9: -0.1}, {3: -0.2}], "stop"),
                                     _completion([6], [{6: -1.25}], "length")]),
            SimpleNamespace(outputs=[_completion([], [], "stop"), _completion([4], [{7: -0.3, 4: -2.0}], "length")])]
    tokens, logps, reasons = ve.request_outputs_to_lists(outs)
    assert tokens == [[5, 3], [6], [], [4]]
    assert logps == [[-0.7, -0.2], [-1.25], [], [-2.0]]
    assert reasons == ["stop", "length", "stop", "length"]
    with pytest.raises(RuntimeError, match="no logprobs"):
        ve.request_outputs_to_lists([SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1], logprobs=None,
                                                                              finish_reason="stop")])])


def test_sampling_kwargs():
    kw = ve.sampling_kwargs(group_size=4, max_new_tokens=16, temperature=0.7, top_p=0.9, top_k=0,
                            stop_ids=[2, 7], seed=None)
    assert kw == {"n": 4, "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": -1,
                  "stop_token_ids": [2, 7], "logprobs": 0, "seed": None, "detokenize": False}
    assert ve.sampling_kwargs(group_size=2, max_new_tokens=1, temperature=1.0, top_p=1.0, top_k=5,
                              stop_ids=[], seed=3)["top_k"] == 5


# ---------------------------------------------------------------- weight names and LoRA merging

def test_strip_wrappers():
    assert weights.strip_wrappers("module.model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert weights.strip_wrappers("module._orig_mod.base_model.model.lm_head.weight") == "lm_head.weight"
    assert weights.strip_wrappers("model._fsdp_wrapped_module.layers.1._checkpoint_wrapped_module.self_attn.q_proj"
                             ".weight") == "model.layers.1.self_attn.q_proj.weight"
    assert weights.strip_wrappers("lm_head.modules_to_save.default.weight") == "lm_head.modules_to_save.default.weight"


def test_plain_policy_keeps_hf_names_and_sends_the_tied_head(tiny):
    # vLLM's in-place reload rebuilds the output head from lm_head.weight alone: a tied head left out kept
    # its old weights there (0.62 nats a token of mismatch on SmolLM2 after the embeddings moved)
    model, _ = tiny
    assert model.config.tie_word_embeddings
    sd = model.state_dict()
    items = weights.policy_weight_items(model)
    names = [n for n, _ in items]
    assert names == list(sd) and "lm_head.weight" in names and "model.embed_tokens.weight" in names
    for n, t in items:
        assert torch.equal(t, sd[n])
    assert dict(items)["lm_head.weight"].data_ptr() == dict(items)["model.embed_tokens.weight"].data_ptr()
    wrapped = weights.vllm_weight_items([(f"module._orig_mod.{n}", t) for n, t in sd.items()])
    assert [n for n, _ in wrapped] == names


def test_tied_head_missing_from_the_state_dict_is_added():
    emb = torch.arange(4.0).view(2, 2)
    items = weights.vllm_weight_items([("module.model.embed_tokens.weight", emb), ("model.norm.weight", emb[0])],
                                      tied_head_from="model.embed_tokens.weight")
    assert [n for n, _ in items] == ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    assert items[2][1] is items[0][1]


def test_untied_head_is_kept():
    w = torch.ones(2, 2)
    items = weights.vllm_weight_items([("module.lm_head.weight", w), ("model.norm.weight", w[0]),
                                  ("model.rotary_emb.inv_freq", w[0])])
    assert [n for n, _ in items] == ["lm_head.weight", "model.norm.weight"]


def test_lora_merge_matches_hand_computation(tiny):
    peft = pytest.importorskip("peft")
    model, _ = tiny
    base = {n: t.clone() for n, t in model.state_dict().items()}
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    pm = peft.get_peft_model(model, cfg)
    with torch.no_grad():  # lora_B starts at zero; make the adapter do something
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn_like(p) * 0.1)
    sd = pm.state_dict()
    items = dict(weights.policy_weight_items(pm))
    assert list(items) == list(base)  # the tied head included
    q = "model.layers.1.self_attn.q_proj"
    a = sd[f"base_model.model.{q}.lora_A.default.weight"]  # [r, in]
    b = sd[f"base_model.model.{q}.lora_B.default.weight"]  # [out, r]
    expected = base[f"{q}.weight"] + (8 / 4) * b @ a
    torch.testing.assert_close(items[f"{q}.weight"], expected, rtol=0, atol=1e-6)
    assert not torch.allclose(items[f"{q}.weight"], base[f"{q}.weight"], atol=1e-3)
    k = "model.layers.1.self_attn.k_proj.weight"  # not a LoRA target: untouched
    assert torch.equal(items[k], base[k])
    merged = pm.merge_and_unload().state_dict()  # PEFT's own merge agrees
    for n, t in items.items():
        torch.testing.assert_close(t, merged[n], rtol=0, atol=1e-6)


def test_lora_scalings_reads_each_layer(tiny):
    peft = pytest.importorskip("peft")
    model, _ = tiny
    pm = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=6, target_modules=["o_proj"]))
    assert weights.lora_scalings(pm) == {f"model.layers.{i}.self_attn.o_proj": 3.0 for i in range(2)}
    assert weights.lora_scalings(model.__class__(model.config)) == {}


def test_modules_to_save_replaces_the_original():
    new, old = torch.full((2, 2), 2.0), torch.zeros(2, 2)
    items = weights.vllm_weight_items([("base_model.model.score.original_module.weight", old),
                                  ("base_model.model.score.modules_to_save.default.weight", new)])
    assert len(items) == 1 and items[0][0] == "score.weight" and torch.equal(items[0][1], new)


def test_lora_without_scale_or_with_dora_is_an_error():
    w, a, b = torch.zeros(3, 2), torch.zeros(1, 2), torch.zeros(3, 1)
    named = [("base_model.model.x.base_layer.weight", w), ("base_model.model.x.lora_A.default.weight", a),
             ("base_model.model.x.lora_B.default.weight", b)]
    with pytest.raises(ValueError, match="LoRA module 'x'"):
        weights.vllm_weight_items(named)
    merged = dict(weights.vllm_weight_items(named, lora_scaling={"x": 1.0}))
    assert list(merged) == ["x.weight"]
    with pytest.raises(RlvrError, match="DoRA"):
        weights.vllm_weight_items([("x.lora_magnitude_vector.default.weight", a)])


# ---------------------------------------------------------------- guards

def test_missing_vllm_names_the_extra(monkeypatch):
    monkeypatch.setattr(ve, "_vllm_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RlvrError, match=r"pip install 'rlvr\[vllm\]' on a CUDA machine, or on a CPU `make vllm` "
                                        r"and the .venv-vllm it builds"):  # checked before the GPU; the CPU's way too
        ve.check_vllm_usable()


def test_no_platform_points_to_builtin(monkeypatch):
    monkeypatch.setattr(ve, "_vllm_installed", lambda: True)
    monkeypatch.setattr(ve, "vllm_platform", lambda: "none")  # a CUDA build of vLLM without a GPU
    with pytest.raises(RlvrError, match="needs a CUDA GPU or vLLM's CPU build.*rollout.engine=builtin works on CPU"):
        ve.check_vllm_usable()
    for platform in ("cuda", "cpu"):
        monkeypatch.setattr(ve, "vllm_platform", lambda: platform)
        assert ve.check_vllm_usable() == platform


def test_engine_kwargs_per_platform():
    common = dict(dtype="float32", gpu_memory_utilization=0.3, max_model_len=0, model_max_len=8192, sleep=True, seed=7)
    cpu = ve.engine_kwargs(platform="cpu", kv_cache_gib=None, **common)
    assert cpu == {"dtype": "float32", "seed": 7, "logprobs_mode": "processed_logprobs", "max_model_len": None,
                   "enable_sleep_mode": False, "kv_cache_memory_bytes": 2**30, "enforce_eager": True,
                   "enable_chunked_prefill": False, "max_num_batched_tokens": 8192}
    short = ve.engine_kwargs(platform="cpu", kv_cache_gib=None, **{**common, "max_model_len": 512})
    assert short["max_num_batched_tokens"] == 4096 and short["max_model_len"] == 512
    gpu = ve.engine_kwargs(platform="cuda", kv_cache_gib=None, **common)
    assert gpu == {"dtype": "float32", "seed": 7, "logprobs_mode": "processed_logprobs", "max_model_len": None,
                   "enable_sleep_mode": True, "gpu_memory_utilization": 0.3}
    sized = ve.engine_kwargs(platform="cuda", kv_cache_gib=0.5, **{**common, "max_model_len": 512})
    assert sized["kv_cache_memory_bytes"] == 2**29 and sized["max_model_len"] == 512
    assert "gpu_memory_utilization" not in sized


def test_cpu_thread_env_keeps_what_the_user_set(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert ve.cpu_thread_env(2) == {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert ve.cpu_thread_env(2)["OMP_NUM_THREADS"] == "8"


def test_this_machine_has_no_vllm():
    if ve._vllm_installed():
        pytest.skip("vllm is installed here")
    with pytest.raises(RlvrError, match="vllm package, which is not installed"):
        ve.make_vllm_engine(engine_settings(Config()), torch.nn.Linear(1, 1), "unused")


# ---------------------------------------------------------------- engine call order, with a fake LLM

class FakeLLM:
    def __init__(self, outputs=None):
        self.calls, self.outputs, self.loaded = [], outputs, None

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self):
        self.calls.append(("wake_up",))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def collective_rpc(self, method, kwargs):
        self.calls.append(("collective_rpc", method))
        self.loaded = list(kwargs["weights_iterator"])
        return [None]

    def generate(self, prompts, params, use_tqdm, lora_request):
        self.calls.append(("generate", prompts, params, lora_request))
        return self.outputs


def fake_engine(llm, sleep):
    engine = object.__new__(ve.VllmEngine)  # skip __init__: it needs vllm and a GPU
    engine.llm, engine.sleep_enabled, engine.asleep, engine.weights_version = llm, sleep, False, 0
    engine.adapters_dir, engine.lora = None, None  # merged pushes
    return engine


def test_sleep_and_wake_are_noops_when_disabled():
    llm = FakeLLM()
    engine = fake_engine(llm, sleep=False)
    engine.sleep()
    engine.wake()
    assert llm.calls == []


def test_sleep_wake_and_sync_order(tiny):
    model, _ = tiny
    llm = FakeLLM()
    engine = fake_engine(llm, sleep=True)
    engine.sleep()
    engine.sleep()  # already asleep: once
    n = engine.sync_weights(model)  # wakes first: a sleeping engine's weights are not mapped
    assert llm.calls == [("sleep", 2), ("wake_up",), ("collective_rpc", "reload_weights"),
                         ("reset_prefix_cache",)]
    assert len(llm.loaded) == len(model.state_dict())  # the tied head included
    assert n == sum(t.numel() * 4 for _, t in llm.loaded)  # the bytes handed over: fp32
    assert not engine.asleep and engine.weights_version == 1


def test_generate_builds_requests_and_rollout(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    outs = [SimpleNamespace(outputs=[_completion([5, 2], [{5: -0.5}, {2: -0.25}], "stop"),
                                     _completion([6, 6], [{6: -1.0}, {6: -2.0}], "length")])]
    llm = FakeLLM(outs)
    engine = fake_engine(llm, sleep=True)
    engine.asleep = True
    r = engine.generate([[1, 4]], group_size=2, max_new_tokens=2, temperature=0.8, top_p=0.95, top_k=0,
                        stop_ids=[2], pad_id=0, seeds=[10])
    assert llm.calls[0] == ("wake_up",)
    _, prompts, params, lora = llm.calls[1]
    assert lora is None  # merged weights: the base model's name
    assert prompts == [{"prompt_token_ids": [1, 4]}]
    assert params == [ve.sampling_kwargs(group_size=2, max_new_tokens=2, temperature=0.8, top_p=0.95, top_k=0,
                                         stop_ids=[2], seed=10)]
    assert r.completion_ids.tolist() == [[5, 2], [6, 6]] and r.truncated.tolist() == [False, True]
    assert r.sampler_logp.tolist() == [[-0.5, -0.25], [-1.0, -2.0]]
