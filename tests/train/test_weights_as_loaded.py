"""Weights as users load them: model.dtype auto / bfloat16 with LoRA holds the frozen base in its own dtype,
with no fp32 copy of it anywhere (the reference is the base with adapters off, rollouts decode with the
policy's own weights)."""
from pathlib import Path

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import checkpoint_dtype, load_model, tiny_random, weight_dtype
from rlvr.rollout.engines import rollout_weights, trains_fp32
from rlvr.train.assemble import setup
from rlvr.train.batch import Batch
from rlvr.train.forward import completion_logprobs, reference_logprobs
from rlvr.train.update import policy_update, reference_forward

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def bf16_dir(tmp_path):
    """tiny-random saved as a bf16 checkpoint (config.json says dtype bfloat16), with its tokenizer."""
    model, tok = tiny_random()
    model.to(torch.bfloat16).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def test_auto_is_the_checkpoints_dtype_and_bf16_on_cuda():
    assert weight_dtype("auto", "bfloat16", CPU) == torch.bfloat16
    assert weight_dtype("auto", "float32", CPU) == torch.float32  # the laptop path keeps an fp32 checkpoint
    assert weight_dtype("auto", None, CPU) == torch.float32
    assert weight_dtype("auto", "float32", CUDA) == torch.bfloat16
    assert weight_dtype("auto", "float16", CUDA) == torch.bfloat16  # fp16 would need loss scaling
    assert weight_dtype("float32", "bfloat16", CUDA) == torch.float32  # a named dtype is what it says
    assert weight_dtype("bfloat16", None, CPU) == torch.bfloat16


def test_auto_loads_a_bf16_checkpoint_in_bf16(bf16_dir):
    assert checkpoint_dtype(bf16_dir) == "bfloat16"
    model, _ = load_model(str(bf16_dir), "auto")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model, _ = load_model("tiny-random", "auto")  # built in fp32, on the CPU: stays fp32
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_a_bf16_policy_decodes_with_its_own_weights():
    fp32, bf16 = tiny_random()[0], tiny_random()[0].to(torch.bfloat16)
    assert trains_fp32(fp32) and not trains_fp32(bf16)
    assert rollout_weights("auto", CUDA, "bf16", trains_fp32(fp32)) == "bf16"  # a bf16 copy of fp32 weights
    assert rollout_weights("auto", CUDA, "bf16", trains_fp32(bf16)) == "fp32"  # the policy itself
    assert rollout_weights("bf16", CUDA, "bf16", False) == "bf16"  # asked for by name: made


def test_lora_on_a_bf16_base_holds_no_fp32_copy_and_its_reference_is_adapters_off(bf16_dir, tmp_path):
    cfg = build_config(ARITHMETIC, [f"--model.name={bf16_dir}", "--model.dtype=auto", "--model.lora.r=4",
                                    "--algo.beta=0.1", "--optimizer.lr=0.05", "--optimizer.warmup_steps=0",
                                    "--rollout.prompts_per_step=2", "--rollout.group_size=3",
                                    "--rollout.max_new_tokens=6", f"--train.out={tmp_path / 'run'}",
                                    "--task.heldout_size=2", "--task.ood_size=0"])
    run = setup(cfg)
    m_, s = run.models, run.settings
    frozen = [p for p in m_.policy.parameters() if not p.requires_grad]
    trained = [p for p in m_.policy.parameters() if p.requires_grad]
    assert sum(p.numel() for p in frozen if p.dtype == torch.float32) == 0  # the base: all bf16
    assert {p.dtype for p in trained} == {torch.float32}  # the adapters (PEFT keeps them fp32)
    assert run.engine.policy is m_.policy and m_.ref.model is m_.policy  # no second copy of the base
    prompts = [m_.tok(t)["input_ids"] for t in ("1+1=", "2*3=")]
    r = run.engine.generate(prompts, seeds=[0, 1], group_size=3, max_new_tokens=6, temperature=1.0, top_p=1.0,
                            top_k=0, stop_ids=list(s.rollout.sampling.stop_ids), pad_id=s.rollout.sampling.pad_id)
    batch = Batch(prompts=prompts, completion_ids=r.completion_ids, completion_mask=r.completion_mask,
                  advantages=torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0]), group_size=3)
    m = policy_update(m_.policy, m_.optimizer, batch, s.update, reference_forward(m_.ref, batch, s.update))
    assert m["grad_norm"] > 0
    state = [t for s in m_.optimizer.state.values() for t in s.values() if t.dim() > 0]
    assert sum(t.numel() for t in state) == 2 * sum(p.numel() for p in trained)  # AdamW: m and v of adapters only
    args = (batch.prompts, batch.completion_ids, batch.completion_mask, 3, s.rollout.sampling.pad_id)
    with torch.no_grad():
        ref = reference_logprobs(m_.ref, *args)
        with m_.policy.disable_adapter():
            base = completion_logprobs(m_.policy, *args)
        policy = completion_logprobs(m_.policy, *args)
    assert torch.equal(ref, base)
    assert (policy - base).abs().max() > 0  # the update moved the adapters: the reference is not the policy
