"""The 4-bit base (model.quantize=nf4, rlvr/nf4.py): the format's error bound, LoRA on it, one set of weights
for the trainer, the reference and the sampler, and a run on it that learns."""
import json

import pytest
import torch

from rlvr.cli import main
from rlvr.config import LoraConfig, build_config
from rlvr.errors import RlvrError
from rlvr.models import apply_lora, load_model, tiny_random
from rlvr.nf4 import BLOCK, HALF_GAP, LEVELS, is_nf4, quantize_base, to_nf4, weight_bytes
from rlvr.train.forward import Reference, completion_logprobs, reference_logprobs
from rlvr.rollout.engines import make_engine, trains_fp32
from rlvr.train.settings import engine_settings
from tests.train.test_learns import digit_share  # noqa: F401 (the run names it by this module's path)

pytest.importorskip("torchao")


def test_the_levels_are_qloras_and_the_bound_is_half_their_widest_gap():
    assert len(LEVELS) == 16 and LEVELS[0] == -1.0 and LEVELS[7] == 0.0 and LEVELS[-1] == 1.0
    assert HALF_GAP == pytest.approx((1.0 - 0.6962) / 2)  # between -1 and -0.6962


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_is_within_the_formats_bound(dtype):
    """Each weight is rounded to the nearest of the 16 levels times its 64-block's absmax, so it is off by at
    most HALF_GAP x absmax; the absmax itself is stored as int8 around the mean of the absmaxes (one step
    per 256 blocks: 2 x max |absmax - mean| / 256), which moves a weight by at most |level| <= 1 times half
    that step; and the format computes in the weight's dtype, each rounding at most the unit roundoff u of
    what it rounds: the mean of the absmaxes (u x mean), the scale's quotient and sum (2u x absmax), the
    scaled weight, the level and the product (3u x absmax), and the error of the scale times the level."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(512, 1024, generator=g) * torch.rand(512, 1, generator=g)).to(dtype)  # rows of unlike scales
    q = to_nf4(w)
    assert is_nf4(q) and q.dtype == dtype and q.shape == w.shape
    back = q.get_original_weight().float()
    blocks = w.float().view(-1, BLOCK)
    absmax = blocks.abs().amax(-1, keepdim=True)  # [n_blocks, 1]
    scaler_half_step = (absmax - absmax.mean()).abs().max() / 256
    u = torch.finfo(dtype).eps / 2
    bound = HALF_GAP * absmax + scaler_half_step + u * (absmax.mean() + 6 * absmax)
    err = (back.view(-1, BLOCK) - blocks).abs()
    assert (err <= bound).all(), (err - bound).max()
    assert err.max() > 0.5 * HALF_GAP * absmax.min()  # not a loose bound on an exact copy: it is 4 bits
    # what it stores: 4 bits a weight plus an int8 scale per 64 and a scale per 256 of those
    assert weight_bytes(torch.nn.Linear(1024, 512, bias=False).requires_grad_(False)) == 512 * 1024 * 4
    packed = sum(getattr(q, a).numel() * getattr(q, a).element_size() for a in q.__tensor_flatten__()[0])
    assert packed < 512 * 1024 * 0.52 + 64 * 16  # 0.5 byte a weight + 1/64 byte of scales + the levels table


def test_quantize_base_leaves_the_head_and_embeddings_and_keeps_the_outputs_close():
    model, tok = tiny_random()
    ids = torch.tensor([tok("12+34=")["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits.log_softmax(-1)
    n = quantize_base(model)
    assert n == 2 * 7  # q k v o gate up down in each of 2 layers
    kinds = {name: is_nf4(p) for name, p in model.named_parameters()}
    assert not kinds["model.embed_tokens.weight"] and all(kinds[k] for k in kinds if k.endswith("_proj.weight"))
    with torch.no_grad():
        after = model(input_ids=ids).logits.log_softmax(-1)
    assert 0 < (after - before).abs().max() < 0.5  # 4-bit weights move the log-probs, but not far
    assert weight_bytes(model) < 0.5 * weight_bytes(tiny_random()[0])


def test_nf4_is_refused_without_lora():
    with pytest.raises(RlvrError, match="model.lora.r > 0"):
        build_config(None, ["--model.quantize=nf4"])
    with pytest.raises(RlvrError, match="own 4-bit weights: use rollout.weights auto or fp32"):
        build_config(None, ["--model.quantize=nf4", "--model.lora.r=4", "--rollout.weights=int8"])


def test_nf4_with_vllm_pushes_adapters_only():
    """vLLM holds the base in the model's own dtype, so only the adapters can cross: a merged push, or NCCL (whole
    tensors), is refused naming both settings; auto and adapters are taken."""
    for extra in (["--rollout.vllm.sync=merged"],
                  ["--rollout.vllm.server_url=http://h:1", "--rollout.vllm.weight_push=nccl"]):
        with pytest.raises(RlvrError, match="model.quantize=nf4 with vLLM pushes the LoRA adapters alone.*"
                                            "rollout.vllm.sync auto or adapters, and rollout.vllm.weight_push=disk"):
            build_config(None, ["--model.quantize=nf4", "--model.lora.r=4", "--rollout.engine=vllm", *extra])
    for sync in ("auto", "adapters"):
        cfg = build_config(None, ["--model.quantize=nf4", "--model.lora.r=4", "--rollout.engine=vllm",
                                  f"--rollout.vllm.sync={sync}", "--rollout.vllm.server_url=http://h:1"])
        assert cfg.rollout.vllm.sync == sync


def test_lora_on_nf4_trains_adapters_and_reference_and_sampler_read_the_same_4bit_weights():
    policy, tok = load_model("tiny-random", "float32", "cpu", "nf4")
    plain, _ = tiny_random()
    policy = apply_lora(policy, LoraConfig(r=4))
    cfg = build_config(None, ["--model.name=tiny-random", "--model.quantize=nf4", "--model.lora.r=4"])
    engine = make_engine(engine_settings(cfg), policy, None)
    assert engine.policy is policy  # decodes with the policy's own (4-bit) weights
    assert not trains_fp32(policy)  # so on CUDA too: rollout.weights auto makes no bf16 copy of them
    ref = Reference.of(policy)
    assert ref.model is policy and ref.adapters_off
    assert all(not p.requires_grad for p in policy.parameters() if is_nf4(p))
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=")]
    r = engine.generate(prompts, seeds=[0, 1], group_size=2, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0,
                        stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    args = (prompts, r.completion_ids, r.completion_mask, 2, tok.pad_token_id)
    with torch.no_grad():
        trainer = completion_logprobs(policy, *args)
        reference = reference_logprobs(ref, *args)
        unquantised = completion_logprobs(plain, *args)
    real = r.completion_mask.bool()
    # the sampler's log-probs are the trainer's (the same weights; decode and training forwards differ in float order)
    assert torch.allclose(r.sampler_logp[real], trainer[real], atol=1e-4)
    assert torch.equal(reference, trainer)  # B = 0 at the start: adapters off is the policy itself
    assert (unquantised[real] - trainer[real]).abs().max() > 1e-3  # and both are the 4-bit model, not the fp32 one


@pytest.mark.slow
def test_a_lora_run_on_an_nf4_base_learns(tmp_path):
    """tests/train/test_learns.py's learnable reward (the share of digits), LoRA on a 4-bit base: adapters on
    two NF4 layers (o_proj, down_proj) and on the output head (in model.dtype), which a digit share needs
    most (measured: 0.08 -> 1.00 by step 8; adapters on the attention alone barely move it in 20 steps, on
    an NF4 base as on an fp32 one)."""
    out = tmp_path / "run"
    assert main(["train", "--model.name=tiny-random", "--model.quantize=nf4", "--model.lora.r=8",
                 "--model.lora.target_modules=[o_proj,down_proj,lm_head]", f"--rewards.weights={{'{__name__}:digit_share': 1.0}}",
                 "--rollout.prompts_per_step=4", "--rollout.group_size=8", "--rollout.max_new_tokens=8",
                 "--optimizer.lr=3e-2", "--train.steps=20", "--train.threads=1", "--train.seed=0",
                 "--eval.before=false", "--eval.after=false", "--train.save_every=0",
                 "--task.heldout_size=2", "--task.ood_size=2", f"--train.out={out}"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    share = [m[f"reward/{__name__}:digit_share/mean"] for m in rows]
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert first < 0.4 and last > 0.8, share
    assert (out / "final" / "adapter").is_dir() and (out / "final" / "model.safetensors").is_file()
    merged, _ = load_model(str(out / "final"))
    assert {p.dtype for p in merged.parameters()} == {torch.float32}  # saved dequantised, adapters merged


def test_a_checkpoint_quantised_on_the_cpu_leaves_no_mapping_of_its_file(tmp_path):
    """safetensors maps the checkpoint and the loaded tensors are views of it: were the embeddings left as
    such views, the file's mapping, with every fp32 page the quantisation read, would stay resident."""
    import gc

    model, tok = tiny_random()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    plain, _ = load_model(str(tmp_path / "m"), "float32", "cpu")
    mapped = lambda: str(tmp_path / "m" / "model.safetensors") in open("/proc/self/maps").read()
    assert mapped()  # a plain load keeps its weights in the file's pages: nothing copied
    del plain
    gc.collect()
    quantised, _ = load_model(str(tmp_path / "m"), "float32", "cpu", "nf4")
    gc.collect()
    assert not mapped()
    head = quantised.get_output_embeddings().weight
    assert head is quantised.get_input_embeddings().weight  # the tie survives the copy
    assert torch.equal(head, model.get_output_embeddings().weight)
