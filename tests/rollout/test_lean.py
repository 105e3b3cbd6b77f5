"""The lean decode step (rlvr/rollout/lean.py): the same logits as the transformers forward, for the
policy and its rollout copies, compiled (rollout.compile), and through the engine."""
import copy
import logging
import os
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, MistralConfig

from rlvr.config import build_config
from rlvr.config.sections import ConfigError
from rlvr.rollout import lean
from rlvr.rollout.decoding import prefill
from rlvr.rollout.builtin import generate
from rlvr.rollout.kvcache import PreallocatedLayer, cache_arg, cache_out
from rlvr.rollout.quant import rollout_copy

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 9, 12, 13, 14, 15, 16]]  # different lengths: left padding


def decode_both(model, steps: int = 3):
    """Logits of `steps` decode steps through the transformers forward and through lean.step, from the
    same prefilled cache (each path its own copy), feeding the same tokens. Returns [(hf, lean)] [A, V]."""
    with torch.no_grad():
        out, mask = prefill(model, PROMPTS, pad_id=0, min_shared=100, logits_to_keep=1)  # [P, Tp]
        cache_hf = cache_out(out)
        cache_hf.layers = [PreallocatedLayer(l.keys, l.values, mask.shape[1] + steps) for l in cache_hf.layers]
        cache_lean = copy.deepcopy(cache_hf)
        pos = mask.sum(-1)  # [P] next position
        tok = out.logits[:, -1].argmax(-1)  # [P]
        pairs = []
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], -1)
            hf = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                       use_cache=True, **cache_arg(cache_hf)).logits[:, -1]
            pairs.append((hf, lean.step(model, tok, pos, cache_lean, mask)))
            tok, pos = hf.argmax(-1), pos + 1
        assert cache_lean.layers[0].length == cache_hf.layers[0].length == mask.shape[1]
        return pairs


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "int8"])
def test_step_matches_the_transformers_forward(tiny, fmt):
    model, _ = tiny
    m = model if fmt == "fp32" else rollout_copy(model, fmt)
    assert lean.supports(m)
    for hf, fast in decode_both(m):
        assert torch.allclose(fast, hf, atol=1e-5, rtol=0), (fast - hf).abs().max()


def test_supports_only_full_attention_llama_family(tiny):
    model, _ = tiny
    assert lean.supports(model)
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    assert not lean.supports(gpt2)
    small = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=50)
    assert lean.supports(AutoModelForCausalLM.from_config(MistralConfig(sliding_window=None, **small)))
    assert not lean.supports(AutoModelForCausalLM.from_config(MistralConfig(sliding_window=8, **small)))


def test_only_rollout_copies_compile(tiny):
    model, _ = tiny
    assert not lean.compilable(model)  # the fp32 policy: separate q/k/v layers (and maybe LoRA)
    assert lean.compilable(rollout_copy(model, "int8")) and lean.compilable(rollout_copy(model, "bf16"))
    assert not lean.compile_decode(model) and getattr(model, "rlvr_compiled", None) is None


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("clang++") is None,
                    reason="torch.compile needs a C++ compiler (CI installs g++: .ci/run)")
@pytest.mark.slow
def test_compiled_layers_match_eager(tiny):
    model, _ = tiny
    eager = [fast for _, fast in decode_both(rollout_copy(model, "int8"))]
    c = rollout_copy(model, "int8")
    assert lean.compile_decode(c)
    compiled = [fast for _, fast in decode_both(c)]
    assert c.rlvr_compiled is not None  # did not fall back
    for a, b in zip(compiled, eager):
        assert torch.allclose(a, b, atol=1e-4, rtol=0), (a - b).abs().max()


def test_a_failing_compilation_falls_back_and_undoes_its_cache_writes(tiny, caplog):
    model, _ = tiny
    expected = [fast for _, fast in decode_both(rollout_copy(model, "int8"))]
    c = rollout_copy(model, "int8")
    lean.compile_decode(c)
    calls = []

    def inputs_then_fail(*args):  # the first layer runs (and writes its cache), the second fails
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("no C++ compiler")
        return lean._attention_inputs(*args)

    c.rlvr_compiled.inputs = inputs_then_fail
    c.rlvr_compiled.rest = lean._output_and_mlp
    with caplog.at_level(logging.WARNING, logger="rlvr.rollout.lean"):
        got = [fast for _, fast in decode_both(c)]
    assert c.rlvr_compiled is None and "no C++ compiler" in caplog.text
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_rollout_compile_needs_a_builtin_rollout_copy():
    with pytest.raises(ConfigError, match="rollout.compile"):
        build_config(None, ["--model.name=tiny-random", "--rollout.compile=true"])
    cfg = build_config(None, ["--model.name=tiny-random", "--rollout.compile=true", "--rollout.weights=int8"])
    assert cfg.rollout.compile


def test_the_engine_decodes_a_compiled_copy_through_the_lean_step(tiny, monkeypatch):
    model, _ = tiny
    calls = []
    real = lean.step
    monkeypatch.setattr(lean, "step", lambda *a: calls.append(1) or real(*a))
    kw = dict(group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[], pad_id=0, seeds=[1, 2])
    c = rollout_copy(model, "int8")
    eager = generate(c, PROMPTS, **kw)
    assert not calls  # uncompiled: the transformers forward
    lean.compile_decode(c)
    c.rlvr_compiled.inputs, c.rlvr_compiled.rest = lean._attention_inputs, lean._output_and_mlp  # not compiled
    got = generate(c, PROMPTS, **kw)
    assert len(calls) == 3  # every token after the first (which comes from the prefill's logits)
    assert torch.equal(got.completion_ids, eager.completion_ids)
    assert torch.allclose(got.sampler_logp, eager.sampler_logp, atol=1e-5, rtol=0)
