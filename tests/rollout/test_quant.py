"""Rollout weights in bf16 / int8 (rlvr/rollout/quant.py, rollout.weights): the quantisation by hand, the
copy the engine samples with, its refresh after an update, sessions, LoRA, and a run through the CLI."""
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rlvr.config import build_config
from rlvr.errors import RlvrError
from rlvr.rollout.builtin import generate
from rlvr.rollout.engines import PolicyEngine, QuantizedEngine, make_engine
from rlvr.train.settings import engine_settings
from rlvr.rollout.quant import Bf16Linear, Int8Linear, FusedSlice, quantize_rows, refresh, rollout_copy

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 22, 23]]
W = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.0, -0.5], [0.0, 0.0, 0.0]])  # [N=3, K=3]; the last row all zero
X = torch.tensor([[1.0, -0.5, 0.25]])  # [M=1, K=3]


def logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0]  # [T, V]


def engine_of(model, weights="int8"):
    return QuantizedEngine(model, weights, generate, keeps_cache=True)


# ---------------------------------------------------------------- the quantisation, by hand


def test_quantize_rows_by_hand():
    q, scale = quantize_rows(W)
    # scale = max|row| / 127; 0.5 * 127 = 63.5 rounds half to even (64), 0.25 * 127 = 31.75 -> 32
    assert torch.equal(scale, torch.tensor([1 / 127, 2 / 127, 0.0]))  # fp32 division is correctly rounded
    assert q.dtype == torch.int8
    assert q.tolist() == [[64, -127, 32], [127, 0, -32], [0, 0, 0]]


def test_int8_linear_is_the_integer_product_rescaled():
    """x quantises like a weight row: q_x = [127, -64, 32], s_x = 1/127. Row 0: (127*64 + 64*127 + 32*32)
    / 127^2 = 17280/16129 (exact fp32: 0.5 + 0.5 + 0.0625 = 1.0625); row 1: (127*127 - 32*32) * 2 / 127^2
    = 30210/16129 (exact: 2 - 0.125 = 1.875); the zero row gives 0."""
    layer = Int8Linear(W)
    y = layer(X)  # [1, 3]
    assert y.tolist()[0] == pytest.approx([17280 / 16129, 30210 / 16129, 0.0], rel=1e-6)
    # error bound: sum_k |x_k| s_w / 2 + |w^_k| s_x / 2 (w^ the dequantised weight); row 0: 1.75 / 254 +
    # (64 + 127 + 32) / 127 / 254 = 0.01380, row 1: 1.75 * 2 / 254 + (127 + 0 + 32) * 2 / 127 / 254 = 0.02364
    exact = X @ W.T
    assert (y - exact).abs()[0, :2].tolist() == pytest.approx([17280 / 16129 - 1.0625, 1.875 - 30210 / 16129],
                                                               abs=3e-7)  # an fp32 ulp at 1.9 is 1.2e-7
    assert ((y - exact).abs()[0, :2] <= torch.tensor([0.01380, 0.02364])).all()


def test_int8_linear_within_the_bound_on_random_rows():
    torch.manual_seed(1)
    w, x = torch.randn(40, 64), torch.randn(5, 7, 64)  # [N, K], [.., M, K]
    layer = Int8Linear(w)
    y = layer(x)  # [5, 7, 40]
    rows = x.reshape(-1, 64)
    sx, sw = rows.abs().amax(-1) / 127, w.abs().amax(-1) / 127
    bound = rows.abs().sum(-1)[:, None] * sw / 2 + layer.dequantized().abs().sum(-1) * sx[:, None] / 2  # [M, N]
    err = (y.reshape(-1, 40) - rows @ w.T).abs()
    assert (err <= bound * (1 + 1e-5)).all()
    assert err.max() > 0.01 * bound.max()  # a real approximation, not the fp32 product


def test_bf16_linear_is_the_bf16_product():
    layer = Bf16Linear(W)
    assert layer.weight.dtype == torch.bfloat16
    y = layer(X)
    assert y.dtype == torch.float32
    assert torch.equal(y, F.linear(X.bfloat16(), W.bfloat16()).float())


# ---------------------------------------------------------------- the copy


@pytest.mark.parametrize("fmt, cls", [("int8", Int8Linear), ("bf16", Bf16Linear)])
def test_copy_swaps_every_linear_and_leaves_the_policy(tiny, fmt, cls):
    model, _ = tiny
    before = {n: p.clone() for n, p in model.state_dict().items()}
    copy = rollout_copy(model, fmt)
    swapped = [n for n, m in copy.named_modules() if isinstance(m, (cls, FusedSlice)) and "fused_" not in n]
    assert len(swapped) == 2 * 7 + 1  # q k v o gate up down per layer, and the lm_head
    assert not any(isinstance(m, nn.Linear) for m in copy.modules())
    assert all(isinstance(m, nn.Linear) for n, m in model.named_modules() if n in swapped)  # policy untouched
    attn = copy.model.layers[1].self_attn  # q, k and v read one input: one product, rows in that order
    assert [(p.start, p.stop) for p in (attn.q_proj, attn.k_proj, attn.v_proj)] == [(0, 64), (64, 96), (96, 128)]
    w = model.model.layers[1].self_attn
    assert torch.equal(attn.fused_q_proj_k_proj_v_proj.weight,
                       cls(torch.cat([w.q_proj.weight, w.k_proj.weight, w.v_proj.weight])).weight)
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    emb = model.model.embed_tokens.weight  # the tied lm_head is quantised from the embedding
    if fmt == "int8":  # within half a quantisation step of its row
        assert ((copy.lm_head.dequantized() - emb).abs() <= emb.abs().amax(-1, keepdim=True) / 254 * (1 + 1e-5)).all()
    else:
        assert torch.equal(copy.lm_head.weight, emb.detach().bfloat16())
    assert copy.model.embed_tokens.weight.data_ptr() != emb.data_ptr()  # a snapshot, not the live weights
    assert not any(p.requires_grad for p in copy.parameters()) and not copy.training


def test_unknown_format_is_an_error(tiny):
    with pytest.raises(RlvrError, match="rollout.weights 'int4'"):
        rollout_copy(tiny[0], "int4")


def test_make_engine_follows_rollout_weights(tiny, tmp_path):
    model, _ = tiny
    fp32 = make_engine(engine_settings(build_config(None, [])), model, tmp_path)
    assert type(fp32) is PolicyEngine and fp32.policy is model
    int8 = make_engine(engine_settings(build_config(None, ["--rollout.weights=int8"])), model, tmp_path)
    assert isinstance(int8, QuantizedEngine) and int8.keeps_cache and int8.policy is not model
    hf = make_engine(engine_settings(build_config(None, ["--rollout.weights=bf16", "--rollout.engine=hf"])), model, tmp_path)
    assert isinstance(hf, QuantizedEngine) and not hf.keeps_cache


# ---------------------------------------------------------------- the engine samples with the copy


def test_engine_samples_from_the_copy(tiny):
    """The rollout's log-probs are the copy's (a full forward of the copy), which differ a little from
    the policy's: the int8 copy is a small, nonzero perturbation of the fp32 logits."""
    model, tok = tiny
    engine = engine_of(model)
    seq = PROMPTS[0] + [40, 41, 42]
    diff = (logits(engine.policy, seq) - logits(model, seq)).abs().max()
    assert 1e-4 < diff < 0.02  # 0.008 on this CPU; tiny's logits span -0.5 .. 1.3
    r = engine.generate(PROMPTS, seeds=[1, 2], group_size=2, max_new_tokens=6, temperature=1.0, top_p=1.0,
                        top_k=0, stop_ids=[3], pad_id=tok.pad_token_id)
    for b, row in enumerate(r.completion_token_lists()):
        full = logits(engine.policy, PROMPTS[b // 2] + row).log_softmax(-1)  # [T, V]
        start = len(PROMPTS[b // 2])
        want = [float(full[start - 1 + i, t]) for i, t in enumerate(row)]
        assert r.sampler_logp[b, :len(row)].tolist() == pytest.approx(want, abs=1e-5)
        fp32 = logits(model, PROMPTS[b // 2] + row).log_softmax(-1)
        assert max(abs(float(fp32[start - 1 + i, t]) - w) for i, (t, w) in enumerate(zip(row, want))) > 1e-5


def test_sync_weights_requantises_in_place(tiny):
    model, _ = tiny
    engine = engine_of(model)
    up = engine.policy.model.layers[0].mlp.up_proj  # a FusedSlice: rows 128 .. 256 of the fused gate and up
    fused = engine.policy.model.layers[0].mlp.fused_gate_proj_up_proj
    assert (up.start, up.stop) == (128, 256) and fused.weight.shape == (256, 64)
    ptrs = (fused.weight.data_ptr(), fused.scale.data_ptr())
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0] = torch.linspace(-0.3, 0.3, 64)
        model.model.norm.weight.fill_(1.5)
    assert up.dequantized()[0, 0] != pytest.approx(-0.3, abs=0.01)  # the copy is a snapshot until synced
    engine.sync_weights(model)
    assert (fused.weight.data_ptr(), fused.scale.data_ptr()) == ptrs  # same buffers
    assert float(fused.scale[128]) == pytest.approx(0.3 / 127)
    assert (up.dequantized()[0] - torch.linspace(-0.3, 0.3, 64)).abs().max() <= 0.3 / 127 / 2 * (1 + 1e-5)
    assert torch.equal(engine.policy.model.norm.weight, torch.full((64,), 1.5))


def test_session_samples_from_the_copy(tiny):
    """Two turns with an environment turn between: every log-prob is the copy's full forward."""
    model, tok = tiny
    engine = engine_of(model)
    s = engine.session(PROMPTS, seeds=[3, 4], group_size=2, temperature=1.0, top_p=1.0, top_k=0,
                       stop_ids=[3, 30, 31, 32], pad_id=tok.pad_token_id)
    first = s.sample([0, 1, 2, 3], [6] * 4)
    s.extend([0, 3], [[40, 41], [42]])
    second = s.sample([0, 3], [5, 5])
    for b, env, turn in zip([0, 3], [[40, 41], [42]], second):
        seq = PROMPTS[b // 2] + first[b].tokens + env + turn.tokens
        lp = logits(engine.policy, seq).log_softmax(-1)
        start = len(seq) - len(turn.tokens)
        assert turn.logp == pytest.approx([float(lp[start - 1 + i, t]) for i, t in enumerate(turn.tokens)], abs=1e-5)


@pytest.mark.parametrize("fmt, least", [("bf16", 1.0), ("int8", 0.95)])  # both 1.0 on this CPU
def test_greedy_agrees_with_fp32(tiny, fmt, least):
    model, tok = tiny
    kw = dict(group_size=1, max_new_tokens=24, temperature=0.0, stop_ids=[], pad_id=tok.pad_token_id)
    prompts = [PROMPTS[0], PROMPTS[1], [5, 9, 17, 40, 41, 60, 61, 62], [70, 71, 72, 5, 6, 7, 8]]
    ref = generate(model, prompts, **kw).completion_ids  # [4, 24]
    got = generate(rollout_copy(model, fmt), prompts, **kw).completion_ids
    assert float((ref == got).float().mean()) >= least


# ---------------------------------------------------------------- LoRA


def test_lora_is_merged_into_the_copy(tiny):
    peft = pytest.importorskip("peft")
    model, _ = tiny
    pm = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], lora_dropout=0.0))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.fill_(0.05)
    q = pm.base_model.model.model.layers[1].self_attn.q_proj
    merged = q.base_layer.weight + 2.0 * q.lora_B["default"].weight @ q.lora_A["default"].weight  # scale 4 / 2
    copy = rollout_copy(pm, "bf16")
    assert isinstance(copy.model.layers[1].self_attn.fused_q_proj_k_proj_v_proj, Bf16Linear)
    assert not any("lora" in n for n, _ in copy.named_modules())
    assert torch.equal(copy.model.layers[1].self_attn.q_proj.weight, merged.detach().bfloat16())
    with torch.no_grad():
        q.lora_A["default"].weight.mul_(-1)
    refresh(copy, pm)
    merged = q.base_layer.weight + 2.0 * q.lora_B["default"].weight @ q.lora_A["default"].weight
    assert torch.equal(copy.model.layers[1].self_attn.q_proj.weight, merged.detach().bfloat16())


def test_lora_on_embeddings_is_refused(tiny):
    peft = pytest.importorskip("peft")
    pm = peft.get_peft_model(tiny[0], peft.LoraConfig(r=2, target_modules=["embed_tokens", "q_proj"]))
    with pytest.raises(RlvrError, match="rollout.weights=int8.*model.lora.target_modules"):
        rollout_copy(pm, "int8")


# ---------------------------------------------------------------- a run


@pytest.mark.slow
def test_int8_rollouts_train_through_the_cli(tmp_path):
    from tests.e2e.test_tiny_run import SMOKE

    from rlvr.cli import main

    out = tmp_path / "int8"
    assert main(["train", *SMOKE, f"--train.out={out}", "--rollout.weights=int8"]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:  # the int8 sampler is not the fp32 trainer: the loop sees the mismatch (0.0013 here;
        assert 1e-4 < m["rollout/logp_mismatch_mean_abs"] < 0.01  # 5e-8 with rollout.weights=fp32)
    assert "weights: int8" in (out / "config.yaml").read_text()


# ---------------------------------------------------------------- rollout.weights=auto: the CUDA default


def test_rollout_weights_auto_is_bf16_only_on_cuda_under_bf16():
    from rlvr.rollout.engines import rollout_weights

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert rollout_weights("auto", cuda, "bf16") == "bf16"
    assert rollout_weights("auto", cuda, "no") == "fp32"  # fp32 training samples from fp32 weights
    assert rollout_weights("auto", cpu, "bf16") == "fp32"  # the CPU default is unchanged
    assert rollout_weights("auto", cpu, "no") == "fp32"
    assert rollout_weights("int8", cpu, "no") == "int8" and rollout_weights("fp32", cuda, "bf16") == "fp32"


def test_bf16_copy_under_autocast_is_the_autocast_forward(tiny):
    """Under bf16 autocast the copy's linear layers hold exactly the bf16 values autocast casts the fp32
    weights to, and return what autocast's nn.Linear returns: the logits are the policy's, bit for bit."""
    model, _ = tiny
    copy = rollout_copy(model, "bf16")
    seq = PROMPTS[1] + [40, 41, 42]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mine, theirs = logits(copy, seq), logits(model, seq)
    assert theirs.dtype == mine.dtype == torch.bfloat16
    assert torch.equal(mine, theirs)
    assert not torch.equal(logits(copy, seq), logits(model, seq))  # outside autocast it is a bf16 model


def test_bf16_copy_is_refreshed_once_per_optimizer_step(tmp_path, monkeypatch):
    """Training with a bf16 copy: the loop refreshes it once per optimizer step, before the next rollout (the
    last step's update is never sampled from), and the copy then holds the policy's weights cast to bf16 (norms
    and embedding as they are)."""
    from tests.e2e.test_tiny_run import SMOKE

    from rlvr.cli import main
    from rlvr.rollout import engines

    real, seen = engines.refresh, []

    def refresh(copy, policy):
        real(copy, policy)
        fused = copy.model.layers[1].self_attn.fused_q_proj_k_proj_v_proj.weight  # [q; k; v] rows, bf16
        attn = policy.model.layers[1].self_attn
        want = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).to(torch.bfloat16)
        head = copy.lm_head.weight  # tied: the embedding's weight, cast
        seen.append(torch.equal(fused, want) and torch.equal(head, policy.model.embed_tokens.weight.bfloat16())
                    and torch.equal(copy.model.norm.weight, policy.model.norm.weight))
    monkeypatch.setattr(engines, "refresh", refresh)
    out = tmp_path / "bf16"
    assert main(["train", *SMOKE, f"--train.out={out}", "--rollout.weights=bf16", "--train.steps=3"]) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3] and seen == [True, True]
