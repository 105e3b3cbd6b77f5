"""Padding-free (packed) training forwards (train.packed, rlvr/train/packed.py): where each token goes, that the
packed forward gives the padded forward's log-probs and gradients (and a packing whose positions do not
restart does not), that the update takes the setting, and that a model whose attention would mix packed rows
is refused.

Tolerances: fp32 on the CPU, the packed and padded forwards run the same weights over the same tokens in
different shapes (packed rows against a prompt pass and length buckets with a cache); their log-probs
agree to 1e-5 on tiny-random and 5e-5 on SmolLM2-135M (30 layers, log-probs of random tokens near -20;
measured: 5e-7 and 1.6e-5), while positions that do not restart move them by 0.07 and 6.0."""
import copy
from dataclasses import replace

import pytest
import torch

from rlvr.config import Config, LoraConfig, OptimizerConfig, TrainConfig

from rlvr.train.settings import update_settings
from rlvr.errors import RlvrError
from rlvr.models import apply_lora, enable_gradient_checkpointing, load_model
from rlvr.train import forward, packed
from rlvr.train.batch import Batch
from rlvr.train.forward import completion_forward, completion_logprobs
from rlvr.train.packed import check_packing, pack
from rlvr.train.update import _micro_batches, policy_update

from tests.train.test_forward import SYSTEM, rollout

TOL = 1e-5  # |packed - padded| log-prob, fp32, tiny-random (module docstring)
TOL_SMOLLM2 = 5e-5


@pytest.fixture(params=["shared", "rows"])
def layout(request, monkeypatch):
    """Each packed layout: shared prompts (what sdpa and eager run) and rows (what flash-attention runs)."""
    monkeypatch.setattr(forward, "shares_prompts", lambda model: request.param == "shared")
    return request.param


def test_pack_shares_each_group_s_prompt():
    """Two prompts, G = 2, shared: a packed row per group. Group 0's prompt once, then row 0's completion
    tokens 0..1 (its last token predicts nothing) and row 1's token 0; group 1's prompt, then row 2's token 0,
    then a pad (token 0, position 0) to the longer row's length; row 3 (no token) is left out. Positions
    continue from the prompt's; a token sees its group's prompt and its own row, a pad the prompt and itself."""
    prompts = [[11, 12], [21, 22, 23]]
    ids = torch.tensor([[1, 2, 3], [4, 8, 0], [5, 6, 0], [0, 0, 0]])
    present = torch.tensor([[1., 1, 1], [1, 1, 0], [1, 1, 0], [0, 0, 0]])
    p = pack(prompts, ids, present, group_size=2, shared=True)
    assert p.ids.tolist() == [[11, 12, 1, 2, 4], [21, 22, 23, 5, 0]]
    assert p.positions.tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 3, 0]]
    assert p.source.tolist() == [[1, 2, 3], [1, 4, 0], [7, 8, 0], [0, 0, 0]]  # in the flattened [2 * 5]
    assert p.valid.tolist() == [[True] * 3, [True, True, False], [True, True, False], [False] * 3]
    mask = p.attention_mask("sdpa")[:, 0].int()  # [2, 5, 5]
    assert mask[0, 3].tolist() == [1, 1, 1, 1, 0]  # row 0's token 1: the prompt and its row
    assert mask[0, 4].tolist() == [1, 1, 0, 0, 1]  # row 1's token 0: the prompt, not row 0
    assert mask[1, 3].tolist() == [1, 1, 1, 1, 0]  # row 2: group 1's prompt, not the pad after it
    assert mask[1, 4].tolist() == [1, 1, 1, 0, 1]  # the pad: the prompt and itself, not row 2
    eager = p.attention_mask("eager")[:, 0]
    assert torch.equal(eager == 0, mask.bool()) and bool((eager[~mask.bool()] == torch.finfo(torch.float32).min).all())


def test_pack_puts_each_token_in_its_place():
    """The rows layout: two prompts, G = 2: row 0 (width 3) packs its prompt and completion tokens 0..1;
    row 1 (width 1) its prompt alone, whose last state predicts its one token; row 2 the other prompt and
    one token; row 3 (no token) is left out. Positions restart at each row; no mask."""
    prompts = [[11, 12], [21, 22, 23]]
    ids = torch.tensor([[1, 2, 3], [4, 0, 0], [5, 6, 0], [0, 0, 0]])
    present = torch.tensor([[1., 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
    p = pack(prompts, ids, present, group_size=2)
    assert p.attention_mask("sdpa") is None
    assert p.ids.tolist() == [[11, 12, 1, 2, 11, 12, 21, 22, 23, 5]]
    assert p.positions.tolist() == [[0, 1, 2, 3, 0, 1, 0, 1, 2, 3]]
    # token t of row b comes from the state at (row start + prompt length - 1 + t)
    assert p.source.tolist() == [[1, 2, 3], [5, 0, 0], [8, 9, 0], [0, 0, 0]]
    assert p.valid.tolist() == [[True, True, True], [True, False, False], [True, True, False],
                                [False, False, False]]


def test_pack_keeps_environment_tokens_as_context():
    """A multi-turn row's environment tokens (present, not trained) are packed like the model's."""
    ids = torch.tensor([[1, 2, 3, 4]])
    completion_mask = torch.tensor([[1., 0, 0, 1]])
    env_mask = torch.tensor([[0., 1, 1, 0]])
    for shared in (False, True):
        p = pack([[9]], ids, completion_mask + env_mask, group_size=1, shared=shared)
        assert p.ids.tolist() == [[9, 1, 2, 3]] and p.positions.tolist() == [[0, 1, 2, 3]]
        assert p.source.tolist() == [[0, 1, 2, 3]]


def wrong_positions(monkeypatch):
    """A deliberately wrong packing: the tokens where pack puts them, positions counting on across rows."""
    real = forward.pack

    def bad(*args):
        p = real(*args)
        return replace(p, positions=torch.arange(p.ids.shape[1], device=p.ids.device).expand_as(p.ids))

    monkeypatch.setattr(forward, "pack", bad)


def max_gap(model, prompts, r, g, **kw):
    padded = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, g, 0, **kw)
    packed = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, g, 0, packed=True, **kw)
    assert packed.shape == padded.shape and torch.equal(packed == 0, padded == 0)
    return float((packed - padded).abs().max().detach())


def test_packed_logprobs_equal_padded_tiny(tiny_on, monkeypatch, layout):
    model, tok = tiny_on
    for head in ("", SYSTEM):
        prompts, r = rollout(model, tok, head=head)
        assert max_gap(model, prompts, r, 3) <= TOL
        assert max_gap(model, prompts, r, 3, temperature=0.7) <= TOL
    wrong_positions(monkeypatch)
    assert max_gap(model, prompts, r, 3) > 100 * TOL  # measured: 0.07


def test_packed_logprobs_equal_padded_smollm2(monkeypatch, layout):
    """SmolLM2-135M-Instruct's real weights (sdpa): prompts of different lengths, completions of 1 to 12
    tokens, one of them empty."""
    model, tok = load_model("smollm2-135m-instruct")
    model.eval()
    prompts = [tok("Compute 17 * 23 - 4 and put the answer in \\boxed{}.")["input_ids"],
               tok("What is 3 + 5?")["input_ids"]]
    lengths = [7, 1, 12, 0, 3, 9]
    ids = torch.randint(3, 1000, (6, 12), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(12)[None, :] < torch.tensor(lengths)[:, None]).float()
    r = Batch(prompts=prompts, completion_ids=ids * mask.long(), completion_mask=mask, group_size=3)
    with torch.no_grad():
        assert max_gap(model, prompts, r, 3) <= TOL_SMOLLM2
        wrong_positions(monkeypatch)
        assert max_gap(model, prompts, r, 3) > 100 * TOL_SMOLLM2  # measured: 6.0


def grads(model, prompts, r, g, packed, entropy_grad=False, fused=False):
    model.zero_grad()
    out = completion_forward(model, prompts, r.completion_ids, r.completion_mask, g, 0, entropy=True,
                             entropy_grad=entropy_grad, fused_head=fused, packed=packed)
    (out.logp.sum() + (out.entropy.sum() if entropy_grad else 0)).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def assert_grads_close(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("entropy_grad,fused", [(False, False), (True, False), (True, True)])
def test_packed_gradients_equal_padded(tiny_on, entropy_grad, fused, layout):
    """The gradient of the log-probs (+ the entropy, through the chunked and the fused head) packed and padded."""
    model, tok = tiny_on
    prompts, r = rollout(model, tok, head=SYSTEM)
    assert_grads_close(grads(model, prompts, r, 3, True, entropy_grad, fused),
                       grads(model, prompts, r, 3, False, entropy_grad, fused))


def test_packed_under_lora_and_checkpointing(tiny, layout):
    """LoRA adapters and gradient checkpointing: the same log-probs and adapter gradients packed and padded."""
    model, tok = tiny
    prompts, r = rollout(model, tok)
    lora = apply_lora(copy.deepcopy(model), LoraConfig(r=4, alpha=8))
    enable_gradient_checkpointing(lora)
    lora.train()
    with torch.no_grad():  # adapters away from zero, so their gradients are not the trivial ones
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    assert max_gap(lora, prompts, r, 3) <= TOL
    assert_grads_close(grads(lora, prompts, r, 3, True), grads(lora, prompts, r, 3, False))


def batch_of(model, tok):
    prompts, r = rollout(model, tok, head=SYSTEM)
    return Batch(prompts=prompts, completion_ids=r.completion_ids, completion_mask=r.completion_mask,
                 advantages=torch.linspace(-1, 1, r.completion_ids.shape[0]), group_size=3)


def update(model, tok, batch, ref=None, **train):
    """One update of a copy of `model` on `batch` under train.* = `train`: (metrics, weights after)."""
    m = copy.deepcopy(model)
    opt = OptimizerConfig(max_grad_norm=0.0, micro_batch_tokens=train.pop("micro_batch_tokens", 0))
    cfg = Config(train=TrainConfig(**train), optimizer=opt)
    cfg.algo.entropy_coef, cfg.algo.beta, cfg.algo.iterations = 0.01, 0.1, 2
    s = update_settings(cfg, tok.pad_token_id, "no")
    ref_logp = forward_ref(ref, batch, s) if ref is not None else None
    metrics = policy_update(m, torch.optim.SGD(m.parameters(), lr=0.1), batch, s, ref_logp)
    return metrics, [p.detach() for p in m.parameters()]


def forward_ref(ref, batch, s):
    from rlvr.train.update import reference_forward

    return reference_forward(ref, batch, s)


@pytest.mark.parametrize("extra", [{}, {"lm_head": "fused"}, {"micro_batch_tokens": 60}])
def test_update_takes_train_packed(tiny, monkeypatch, extra, layout):
    """train.packed runs the update's forwards (the policy's, the reference's) through pack; two
    iterations with an entropy bonus and a KL term then give the padded update's loss and weights within
    rounding, with the fused head and with micro-batches by tokens too."""
    model, tok = tiny
    batch = batch_of(model, tok)
    ref = forward.Reference.of(model)
    calls = []
    real = forward.pack
    monkeypatch.setattr(forward, "pack", lambda *a: calls.append(1) or real(*a))
    m_pad, w_pad = update(model, tok, batch, ref, **dict(extra))
    assert not calls
    m_pack, w_pack = update(model, tok, batch, ref, packed=True, **dict(extra))
    assert calls
    assert m_pack["micro_batches"] == m_pad["micro_batches"] or "micro_batch_tokens" in extra
    for k in ("loss", "kl", "entropy", "grad_norm"):
        assert m_pack[k] == pytest.approx(m_pad[k], rel=1e-4, abs=1e-6), k
    for a, b in zip(w_pack, w_pad):
        assert torch.allclose(a, b, atol=1e-6)


def test_micro_batch_tokens_count_packed_tokens():
    """optimizer.micro_batch_tokens counts what each forward holds: padded (prompts x longest prompt + rows x
    longest completion) or packed (each row's prompt + width - 1). Groups of G = 2: prompt lengths 3, 1, 1,
    widths (4, 1), (2, 2), (1, 0)."""
    ids = torch.ones(6, 4, dtype=torch.long)
    mask = torch.tensor([[1., 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    batch = Batch(prompts=[[5, 6, 7], [5], [5]], completion_ids=ids, completion_mask=mask, group_size=2)
    # packed: group 0 holds (3 + 3) + (3 + 0) = 9, group 1 (1 + 1) * 2 = 4, group 2 1 + 0 = 1
    assert [sl for _, sl, _ in _micro_batches(batch, 1, 13, packed=True)] == [slice(0, 4), slice(4, 6)]
    assert [sl for _, sl, _ in _micro_batches(batch, 1, 14, packed=True)] == [slice(0, 6)]
    # padded: group 0 alone 1 * (3 + 2 * 4) = 11; groups 0-1: 2 * (3 + 8) = 22; groups 1-2: 2 * (1 + 4) = 10
    assert [sl for _, sl, _ in _micro_batches(batch, 1, 13)] == [slice(0, 2), slice(2, 6)]


def tiny_bloom():
    """A real transformers architecture with ALiBi attention, which takes no position ids."""
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    return BloomForCausalLM(BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=4))


def test_a_model_that_mixes_packed_rows_is_refused(tiny, monkeypatch):
    """Bloom (eager attention): its ALiBi cannot take the shared layout's 4D mask; in the rows layout its
    packed rows leak into each other, as a plain causal mask's do."""
    with pytest.raises(RlvrError, match=r"train\.packed: BloomForCausalLM cannot run packed rows .*"
                                        r"set train\.packed=false"):
        check_packing(tiny_bloom())
    monkeypatch.setattr(packed, "shares_prompts", lambda model: False)
    with pytest.raises(RlvrError, match=r"train\.packed: the attention of BloomForCausalLM .* does not keep "
                                        r"packed rows apart.*set train\.packed=false"):
        check_packing(tiny_bloom())
    monkeypatch.undo()
    model, _ = tiny
    check_packing(model)  # Llama, sdpa
    model.config._attn_implementation = "eager"
    check_packing(model)
    check_packing(model.to(torch.bfloat16))


def test_the_run_refuses_it_before_training(tiny):
    from rlvr.config import build_config
    from rlvr.train.assemble import models_of
    from rlvr.train.distributed import Dist

    _, tok = tiny
    cfg = build_config(None, ["--train.packed=true", "--model.name=tiny-random"])
    with pytest.raises(RlvrError, match=r"train\.packed"):
        models_of(cfg, tiny_bloom(), tok, Dist(), "no")
    models_of(cfg, tiny[0], tok, Dist(), "no")  # a Llama passes


def test_packed_with_environment_tokens(tiny, layout):
    """Multi-turn rows: environment tokens (env_mask) are attended to but never scored, packed as padded."""
    model, tok = tiny
    prompts, r = rollout(model, tok)
    env = torch.zeros_like(r.completion_mask)
    env[:, 2:4] = r.completion_mask[:, 2:4]  # tokens 2-3 of each row are an environment's
    mask = r.completion_mask - env
    kw = dict(env_mask=env)
    padded = completion_logprobs(model, prompts, r.completion_ids, mask, 3, 0, **kw)
    packed = completion_logprobs(model, prompts, r.completion_ids, mask, 3, 0, packed=True, **kw)
    assert torch.equal(packed == 0, padded == 0) and bool((packed[:, 2:4] == 0).all())
    assert float((packed - padded).abs().max().detach()) <= TOL


def test_packed_bf16_reference(tiny, layout):
    """The KL reference as a bf16 copy (Reference.of(bf16=True)) runs packed under bf16 autocast: its
    log-probs equal the padded forward's within bf16 rounding (measured: 1.5e-3 at log-probs near -4.6)."""
    from rlvr.train.forward import Reference, reference_logprobs

    model, tok = tiny
    prompts, r = rollout(model, tok)
    ref = Reference.of(model, bf16=True)
    out = [reference_logprobs(ref, prompts, r.completion_ids, r.completion_mask, 3, 0, precision="bf16",
                              packed=packed) for packed in (False, True)]
    assert float((out[0] - out[1]).abs().max()) <= 1e-2
