import copy

import torch

from rlvr.rollout.engine import generate
from rlvr.train.update import Batch, UpdateSettings, policy_update


def make_batch(model, tok):
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8", "7")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, -2.0, 2.0])
    return Batch(prompts, r.completion_ids, r.completion_mask, adv, 2)


def settings(tok, **kw):
    base = dict(clip_low=0.2, clip_high=0.2, iterations=1, beta=0.0, aggregation="seq-mean-token-mean",
                micro_batch_prompts=4, max_grad_norm=0.0, temperature=1.0, pad_id=tok.pad_token_id)
    base.update(kw)
    return UpdateSettings(**base)


def one_step(model, tok, batch, **kw):
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = policy_update(model, opt, batch, settings(tok, **kw))
    return model, m


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        full, m_full = one_step(model, tok, batch, aggregation=agg, micro_batch_prompts=4)
        split, m_split = one_step(model, tok, batch, aggregation=agg, micro_batch_prompts=1)
        for a, b in zip(full.parameters(), split.parameters()):
            assert torch.allclose(a, b, atol=1e-6)
        assert abs(m_full["loss"] - m_split["loss"]) < 1e-6
        assert abs(m_full["grad_norm"] - m_split["grad_norm"]) < 1e-5


def test_first_iteration_ratio_is_one_and_loss_is_minus_mean_advantage(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    _, m = one_step(model, tok, batch)
    assert abs(m["ratio/min"] - 1.0) < 1e-6 and abs(m["ratio/max"] - 1.0) < 1e-6
    assert abs(m["loss"] - float(-batch.advantages.mean())) < 1e-6  # seq-mean, ratio 1
    assert m["kl"] is None


def test_several_iterations_move_the_ratio_and_kl_is_logged(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    ref = copy.deepcopy(model).requires_grad_(False)
    m_model = copy.deepcopy(model)
    opt = torch.optim.SGD(m_model.parameters(), lr=0.5)
    m = policy_update(m_model, opt, batch, settings(tok, iterations=3, beta=0.1), ref=ref)
    assert m["ratio/max"] > 1.0 or m["ratio/min"] < 1.0
    assert m["kl"] is not None and m["kl"] > 0


def test_non_finite_gradient_skips_the_step(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    batch.advantages = torch.full_like(batch.advantages, float("nan"))
    before = [p.clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = policy_update(model, opt, batch, settings(tok))
    assert m["skipped_updates"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
