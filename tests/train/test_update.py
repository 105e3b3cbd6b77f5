import copy
import math

import torch

import dataclasses

from rlvr.config import AlgoConfig, Config, OptimizerConfig, RolloutConfig

from rlvr.train.settings import update_settings
from rlvr.models import checkpointing_active, enable_gradient_checkpointing
from rlvr.rollout.builtin import generate
from rlvr.train.forward import completion_logprobs
from rlvr.train.batch import Batch
from rlvr.train.forward import Reference
from rlvr.train.update import EntropyState, _micro_batches, policy_update, reference_forward

OPTIMIZER_KEYS = {f.name for f in dataclasses.fields(OptimizerConfig)}


def make_batch(model, tok):
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8", "7")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    r = r.to(model.device)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, -2.0, 2.0], device=model.device)
    return Batch(prompts=prompts, completion_ids=r.completion_ids, completion_mask=r.completion_mask, advantages=adv,
                 group_size=2)


def settings(tok, mixed_precision="no", tis_cap=0.0, **keys):
    """Algo and optimizer keys as given, else these: AlgoConfig's defaults without a preset (beta 0,
    seq-mean-token-mean), 4 prompts per micro-batch, no gradient clip."""
    opt = {"micro_batch_prompts": 4, "max_grad_norm": 0.0}
    opt.update({k: keys.pop(k) for k in list(keys) if k in OPTIMIZER_KEYS})
    cfg = Config(algo=AlgoConfig(**keys), optimizer=OptimizerConfig(**opt),
                 rollout=RolloutConfig(max_new_tokens=6, tis_cap=tis_cap))  # make_batch's completions
    return update_settings(cfg, tok.pad_token_id, mixed_precision)


def one_step(model, tok, batch, lr=0.1, ref=None, **kw):
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    s = settings(tok, **kw)
    ref_logp = reference_forward(Reference(ref), batch, s) if ref is not None else None
    m = policy_update(model, opt, batch, s, ref_logp)
    return model, m


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_on):
    model, tok = tiny_on
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


def test_second_iteration_ratio_is_the_first_step_s_probability_ratio(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    ref = copy.deepcopy(model).requires_grad_(False)
    kw = dict(beta=0.1)
    stepped, _ = one_step(model, tok, batch, lr=0.5, ref=ref, **kw)  # what the first of two passes does
    mask = batch.completion_mask.bool()
    logp = lambda m: completion_logprobs(m, batch.prompts, batch.completion_ids, batch.completion_mask, 2,
                                         tok.pad_token_id).detach()
    ratio = (logp(stepped) - logp(model)).exp()[mask]  # pi_after_one_step / pi_old on every real token
    _, m = one_step(model, tok, batch, lr=0.5, ref=ref, iterations=2, **kw)
    assert math.isclose(m["ratio/max"], float(ratio.max()), rel_tol=1e-5)
    assert math.isclose(m["ratio/min"], float(ratio.min()), rel_tol=1e-5)
    assert math.isclose(m["ratio/mean"], float(ratio.mean()), rel_tol=1e-5)  # it reaches the metrics
    assert float(ratio.max()) > 1.01 and m["kl"] is not None and m["kl"] > 0


def test_clip_fractions_and_ratio_mean_are_batch_wide_whatever_the_micro_batches(tiny):
    """Clip fractions are token-weighted over the whole batch, not unweighted means over micro-batches,
    so micro_batch_prompts=1 (micro-batches with different token counts) gives the one-pass values."""
    model, tok = tiny
    batch = make_batch(model, tok)
    assert len(set(batch.completion_mask.sum(-1).tolist())) > 2  # rows of several lengths
    _, whole = one_step(model, tok, batch, lr=2.0, iterations=2, micro_batch_prompts=4)
    _, split = one_step(model, tok, batch, lr=2.0, iterations=2, micro_batch_prompts=1)
    assert whole["clip/low_frac"] + whole["clip/high_frac"] > 0.05  # the second pass really clips
    for key in ("clip/low_frac", "clip/high_frac", "ratio/mean", "approx_kl_old", "entropy", "loss"):
        assert math.isclose(whole[key], split[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_value_loss_gradient_does_not_depend_on_micro_batches(tiny):
    """The value loss is a batch-wide token mean: a token mean per micro-batch weighted by the policy
    aggregation's share would change its gradient with micro_batch_prompts under seq-mean-token-mean."""
    model, tok = tiny
    batch = make_batch(model, tok)
    batch.returns = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(3))
    batch.returns = batch.returns * batch.completion_mask
    batch.old_values = torch.zeros_like(batch.returns)
    heads, metrics = [], []
    for mb in (4, 1):
        torch.manual_seed(0)
        critic = torch.nn.Linear(model.config.hidden_size, 1)
        policy = copy.deepcopy(model)
        opt = torch.optim.SGD([*policy.parameters(), *critic.parameters()], lr=0.1)
        metrics.append(policy_update(policy, opt, batch, settings(tok, micro_batch_prompts=mb, value_clip=None),
                                     critic=critic))
        heads.append(critic.weight.detach().clone())
    torch.testing.assert_close(heads[0], heads[1], rtol=0, atol=1e-6)
    assert math.isclose(metrics[0]["value_loss"], metrics[1]["value_loss"], rel_tol=1e-5)
    assert not torch.allclose(heads[0], torch.nn.Linear(model.config.hidden_size, 1).weight)


def test_non_finite_gradient_skips_the_step(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    batch.advantages = torch.full_like(batch.advantages, float("nan"))
    before = [p.clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = policy_update(model, opt, batch, settings(tok))
    assert m["skipped_updates"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # the batch is fine again: training goes on from the same weights
    batch.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, -2.0, 2.0])
    m = policy_update(model, opt, batch, settings(tok))
    assert m["skipped_updates"] == 0 and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_inf_activation_skips_the_step_and_keeps_optimizer_state_empty(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    before = [p.clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    hook = model.model.layers[1].mlp.register_forward_hook(lambda mod, inp, out: out * float("inf"))
    m = policy_update(model, opt, batch, settings(tok))
    hook.remove()
    assert m["skipped_updates"] == 1 and not math.isfinite(m["grad_norm"])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters()) and not opt.state
    m = policy_update(model, opt, batch, settings(tok))
    assert m["skipped_updates"] == 0 and all(torch.isfinite(p).all() for p in model.parameters())


def test_token_budget_groups_hand_computed():
    # prompt lengths 3, 5, 2, 4; longest completion per group (G = 2) 4, 2, 6, 1
    lengths = [[4, 1], [2, 2], [6, 3], [1, 0]]
    mask = torch.tensor([[1.0] * n + [0.0] * (6 - n) for g in lengths for n in g])  # [8, 6]
    batch = Batch(prompts=[[7] * n for n in (3, 5, 2, 4)], completion_ids=torch.zeros(8, 6, dtype=torch.long),
                  completion_mask=mask,
                  advantages=torch.zeros(8), group_size=2)
    # [0, 1]: 2 * (5 + 2 * 4) = 26 <= 30; + group 2: 3 * (5 + 2 * 6) = 51; [2, 3]: 2 * (4 + 2 * 6) = 32
    mbs = _micro_batches(batch, 4, 30)
    assert [(sl.start, sl.stop, w) for _, sl, w in mbs] == [(0, 4, 4), (4, 6, 6), (6, 8, 1)]
    assert [len(p) for p, _, _ in mbs] == [2, 1, 1]
    # a group over the budget goes alone; no budget: micro_batch_prompts
    assert [sl.stop for _, sl, _ in _micro_batches(batch, 4, 5)] == [2, 4, 6, 8]
    assert [(sl.stop, w) for _, sl, w in _micro_batches(batch, 3, 0)] == [(6, 6), (8, 1)]


def test_token_budget_micro_batches_accumulate_to_the_full_batch_gradient(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    assert len(_micro_batches(batch, 4, 40)) > 1
    for agg in ("token-mean", "seq-mean-token-mean"):
        full, m_full = one_step(model, tok, batch, aggregation=agg, micro_batch_prompts=4)
        split, m_split = one_step(model, tok, batch, aggregation=agg, micro_batch_tokens=40)
        for a, b in zip(full.parameters(), split.parameters()):
            assert torch.allclose(a, b, atol=1e-6)
        assert abs(m_full["grad_norm"] - m_split["grad_norm"]) < 1e-5


def test_gradient_checkpointing_update_equals_plain(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    model.train()
    plain, m_plain = one_step(model, tok, batch)
    ckpt = copy.deepcopy(model)
    enable_gradient_checkpointing(ckpt)
    assert checkpointing_active(ckpt)
    ckpt, m_ckpt = one_step(ckpt, tok, batch)
    assert abs(m_plain["grad_norm"] - m_ckpt["grad_norm"]) < 1e-5
    for a, b in zip(plain.parameters(), ckpt.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_bf16_autocast_is_close_to_fp32(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    fp32, m32 = one_step(model, tok, batch, iterations=2)
    bf16, m16 = one_step(model, tok, batch, iterations=2, mixed_precision="bf16")
    assert m16["grad_norm"] != m32["grad_norm"]  # autocast really ran in bf16
    assert abs(m16["grad_norm"] - m32["grad_norm"]) < 0.01 * m32["grad_norm"]
    assert abs(m16["loss"] - m32["loss"]) < 2e-3
    assert abs(m16["entropy"] - m32["entropy"]) < 1e-3 * m32["entropy"]
    assert all(p.dtype == torch.float32 for p in bf16.parameters())


def test_sampler_logprob_mismatch_is_reported_on_the_first_pass(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    _, m = one_step(model, tok, batch)
    assert "rollout/logp_mismatch_max" not in m
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8", "7")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    batch.sampler_logp = r.sampler_logp.clone()
    _, m = one_step(model, tok, batch, micro_batch_prompts=1, iterations=2)
    assert m["rollout/logp_mismatch_max"] < 1e-5 and m["rollout/logp_mismatch_mean_abs"] < 1e-5
    batch.sampler_logp[3, 0] -= 0.5  # one token off by 0.5
    _, m = one_step(model, tok, batch, micro_batch_prompts=1)
    n_tok = float(batch.completion_mask.sum())
    assert abs(m["rollout/logp_mismatch_max"] - 0.5) < 1e-5
    assert abs(m["rollout/logp_mismatch_mean_abs"] - 0.5 / n_tok) < 1e-5


def test_truncated_importance_sampling_weights_the_policy_gradient(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8", "7")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    batch.sampler_logp = r.sampler_logp.clone()  # sampler == trainer: every weight is 1
    _, plain = one_step(model, tok, batch, aggregation="token-mean")
    _, same = one_step(model, tok, batch, aggregation="token-mean", tis_cap=2.0)
    assert abs(plain["loss"] - same["loss"]) < 1e-6
    # the sampler gave every token of row 0 (advantage +1) log-prob 1 lower: weight min(e, 2) = 2
    batch.sampler_logp[0] -= 1.0
    _, tis = one_step(model, tok, batch, aggregation="token-mean", tis_cap=2.0)
    n_tok, row0 = float(batch.completion_mask.sum()), float(batch.completion_mask[0].sum())
    # ratio 1 on the first pass: loss = -sum(w * A) / n_tok, so row 0 adds -(2 - 1) * 1 * row0 / n_tok
    assert abs(tis["loss"] - (plain["loss"] - row0 / n_tok)) < 1e-5


def sampled_batch(model, tok):
    """make_batch's batch with the sampler's log-probs (here the trainer's own: every ratio is 1)."""
    batch = make_batch(model, tok)
    prompts = [tok(t)["input_ids"] for t in ("1+1=", "2*3=", "40-8", "7")]
    r = generate(model, prompts, group_size=2, max_new_tokens=6, temperature=1.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    batch.sampler_logp = r.sampler_logp.clone()
    return batch


def test_sequence_mask_drops_a_far_sampled_sequence_and_reports_it(tiny):
    model, tok = tiny
    batch = sampled_batch(model, tok)
    _, plain = one_step(model, tok, batch, aggregation="token-mean")
    batch.sampler_logp[0, 0] -= 2.0  # row 0 (advantage +1): sequence ratio e^2 > C_max 3
    _, m = one_step(model, tok, batch, aggregation="token-mean", sampler_correction="sequence_mask", sampler_c_max=3.0)
    n_tok, row0 = float(batch.completion_mask.sum()), float(batch.completion_mask[0].sum())
    # ratio 1 on the first pass: loss = -sum(w * A) / n_tok; row 0's weight is now 0, so its -row0 / n_tok leaves
    assert abs(m["loss"] - (plain["loss"] + row0 / n_tok)) < 1e-5
    assert abs(m["sampler/masked_token_frac"] - row0 / n_tok) < 1e-6
    assert abs(m["sampler/masked_seq_frac"] - 1 / 8) < 1e-6
    assert "sampler/masked_seq_frac" not in plain  # fp32 sampler, auto: no correction, no metric


def test_off_policy_mask_and_entropy_selection_report_their_shares(tiny):
    model, tok = tiny
    batch = sampled_batch(model, tok)
    batch.sampler_logp[1] += 1.0  # row 1 (advantage -1): mean log pi_sampler - log pi = 1 > 0.5
    _, m = one_step(model, tok, batch, off_policy_mask_threshold=0.5, top_entropy_quantile=0.5, micro_batch_prompts=1)
    assert abs(m["off_policy/masked_seq_frac"] - 1 / 8) < 1e-6
    # each micro-batch keeps the upper half of its tokens by entropy (ties at the median are kept)
    assert 0.45 <= m["entropy/selected_frac"] <= 0.7


def test_every_objective_updates_the_policy(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    for objective in ("cispo", "sapo", "gmpo", "gpg", "clip_cov", "kl_cov", "vespo"):
        moved, m = one_step(model, tok, batch, policy_loss=objective, iterations=2)
        assert math.isfinite(m["loss"]) and m["grad_norm"] > 0 and m["skipped_updates"] == 0, objective
        assert any(not torch.equal(a, b) for a, b in zip(moved.parameters(), model.parameters())), objective


def test_adaptive_entropy_raises_the_coefficient_below_the_target(tiny):
    model, tok = tiny
    batch = make_batch(model, tok)
    s = settings(tok, adaptive_entropy=True, entropy_coef=0.01, entropy_target=100.0, entropy_coef_delta=0.005)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay: only the coefficient moves
    state = EntropyState(0.01)
    first = policy_update(model, opt, batch, s, entropy=state)
    state = state.after(s.entropy, first["entropy/watched_mean"])
    second = policy_update(model, opt, batch, s, entropy=state)
    state = state.after(s.entropy, second["entropy/watched_mean"])
    # no entropy measured before the first step: no bonus; then the entropy (< 100 nats) is below target
    assert first["entropy/coef"] == 0.0 and abs(second["entropy/coef"] - 0.015) < 1e-9
    assert abs(state.coef - 0.02) < 1e-9 and state.last_entropy == second["entropy/watched_mean"]
    assert 0 < state.last_entropy == first["entropy"] < 100  # every real token is watched (no selection)


def masked_rows(batch, rows):
    mask = batch.completion_mask.clone()
    mask[rows] = 0.0  # as algo.mask_truncated leaves truncated completions out
    return dataclasses.replace(batch, completion_mask=mask)


def test_a_micro_batch_with_no_trained_token_skips_its_backward(tiny):
    """Prompt 2's group has no trained token: in its own micro-batch it is skipped (and counted), and the
    step equals the one where that group's micro-batch never existed: the same units, the same gradient."""
    model, tok = tiny
    batch = masked_rows(make_batch(model, tok), slice(2, 4))
    for agg in ("token-mean", "seq-mean-token-mean"):
        split, m_split = one_step(model, tok, batch, aggregation=agg, micro_batch_prompts=1, beta=0.1,
                                  ref=copy.deepcopy(model).requires_grad_(False), iterations=2)
        whole, m_whole = one_step(model, tok, batch, aggregation=agg, micro_batch_prompts=4, beta=0.1,
                                  ref=copy.deepcopy(model).requires_grad_(False), iterations=2)
        assert (m_split["micro_batches"], m_split["untrained_micro_batches"]) == (4, 1)
        assert (m_whole["micro_batches"], m_whole["untrained_micro_batches"]) == (1, 0)
        for a, b in zip(split.parameters(), whole.parameters()):
            assert torch.allclose(a, b, atol=1e-6)
        assert abs(m_split["loss"] - m_whole["loss"]) < 1e-6 and m_split["grad_norm"] > 0


def test_a_step_with_no_trained_token_leaves_the_weights_and_says_so(tiny):
    model, tok = tiny
    batch = masked_rows(make_batch(model, tok), slice(None))
    for kw in ({}, {"entropy_coef": 0.01, "top_entropy_quantile": 0.5}, {"aggregation": "token-mean"}):
        stepped, m = one_step(model, tok, batch, micro_batch_prompts=2, **kw)
        assert (m["micro_batches"], m["untrained_micro_batches"], m["skipped_updates"]) == (2, 2, 0)
        assert m["grad_norm"] == 0.0 and m["loss"] == 0.0
        for a, b in zip(model.parameters(), stepped.parameters()):
            assert torch.equal(a, b)
