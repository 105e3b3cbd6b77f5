import warnings

import torch

from rlvr.models import checkpointing_active, enable_gradient_checkpointing

from rlvr.train.settings import update_settings
from rlvr.rollout.builtin import generate
from rlvr.train.forward import MAX_BUCKETS, _positions_needed, completion_forward, completion_logprobs, plan_buckets


def rollout(model, tok, temperature=1.0, head=""):
    """head: a prefix every prompt shares (a system prompt): it is then run once and shared."""
    prompts = [tok(head + q)["input_ids"] for q in ("5+5=", "9*9", "1")]
    r = generate(model, prompts, group_size=3, max_new_tokens=10, temperature=temperature,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    return prompts, r.to(model.device)  # the training batch's crossing to the model's device


def full_forward_logprobs(model, prompts, r, g, temperature=1.0):
    """Reference: each prompt + completion run alone, unpadded, no cache sharing."""
    out = torch.zeros(r.completion_ids.shape, device=model.device)
    for b in range(out.shape[0]):
        p, n = prompts[b // g], int(r.completion_mask[b].sum())
        c = r.completion_ids[b, :n].tolist()
        logp = (model(torch.tensor([p + c], device=model.device)).logits[0] / temperature).log_softmax(-1)
        for t in range(n):
            out[b, t] = logp[len(p) + t - 1, c[t]]
    return out


SYSTEM = "System: answer exactly.\nQ: "


def test_shared_prefix_equals_full_forward(tiny_on):
    model, tok = tiny_on
    for head in ("", SYSTEM):
        prompts, r = rollout(model, tok, head=head)
        lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id)
        assert torch.allclose(lp, full_forward_logprobs(model, prompts, r, 3), atol=1e-5)


def test_sampler_logprobs_match_training_forward(tiny_on):
    model, tok = tiny_on
    for temperature in (1.0, 0.7):
        prompts, r = rollout(model, tok, temperature)
        lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id,
                                 temperature)
        assert torch.allclose(lp, r.sampler_logp, atol=1e-5)


def test_shared_prefix_gradient_equals_full(tiny_on):
    model, tok = tiny_on
    for head in ("", SYSTEM):
        prompts, r = rollout(model, tok, head=head)
        model.zero_grad()
        completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id).sum().backward()
        shared = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        full_forward_logprobs(model, prompts, r, 3).sum().backward()
        for a, p in zip(shared, model.parameters()):
            assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-4)


def test_gradient_checkpointing_runs_full_rows_with_equal_values_and_gradients(tiny_on):
    model, tok = tiny_on
    prompts, r = rollout(model, tok)
    model.train()
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_gradient_checkpointing(model)  # transformers then drops the cache: full rows are run
        with warnings.catch_warnings():  # transformers 5.24's deprecated is_gradient_checkpointing is never read
            warnings.simplefilter("error", FutureWarning)
            assert checkpointing_active(model) == checkpointing
        model.zero_grad()
        lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id)
        (lp * torch.linspace(-1, 1, lp.numel(), device=lp.device).view_as(lp)).sum().backward()
        results.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_a, g_a), (lp_b, g_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-5)
    for a, b in zip(g_a, g_b):
        assert torch.allclose(a, b, atol=1e-5)
    with torch.no_grad():  # no backward to replay: the shared-prefix path again
        assert not checkpointing_active(model)


def ragged_batch(tok, lengths, group_size, seed=0, device="cpu"):
    """Prompts of different lengths and random completions right-padded to max(lengths), on `device`."""
    texts = ["5+5=", "12*34-5=", "7", "(1+2)*3="]
    prompts = [tok(texts[i % len(texts)])["input_ids"] for i in range(len(lengths) // group_size)]
    tc = max(lengths)
    ids = torch.randint(3, len(tok), (len(lengths), tc), generator=torch.Generator().manual_seed(seed))
    mask = (torch.arange(tc)[None, :] < torch.tensor(lengths)[:, None]).long()  # [B, Tc]
    return prompts, (ids * mask + tok.pad_token_id * (1 - mask)).to(device), mask.to(device)


def rows_forward_logprobs(model, prompts, ids, mask, g):
    """Reference: each prompt + completion run alone, unpadded."""
    out = torch.zeros(ids.shape, device=ids.device)
    for b in range(ids.shape[0]):
        p, n = prompts[b // g], int(mask[b].sum())
        logp = model(torch.tensor([p + ids[b, :n].tolist()], device=ids.device)).logits[0].log_softmax(-1)
        out[b, :n] = logp[len(p) - 1:len(p) - 1 + n].gather(-1, ids[b, :n, None]).squeeze(-1)
    return out


RAGGED = {1: [0, 12, 1, 3], 2: [5, 0, 12, 2, 1, 1], 4: [2, 12, 3, 3, 0, 1, 7, 12]}  # empty and full-width rows


def test_plan_buckets_hand_computed():
    assert plan_buckets([1, 1, 1, 10], bucket_overhead=0) == [([0, 1, 2], 1), ([3], 10)]  # 1 * 3 + 10 * 1 = 13
    assert plan_buckets([10, 1, 1, 1], max_buckets=1) == [([1, 2, 3, 0], 10)]  # unbucketed: 40
    # a second forward call must save more than it costs: 13 + 2 * 26 = 65 vs 40 + 26 = 66 splits, 27 not
    assert plan_buckets([1, 1, 1, 10], bucket_overhead=26) == [([0, 1, 2], 1), ([3], 10)]
    assert plan_buckets([1, 1, 1, 10], bucket_overhead=27) == [([0, 1, 2, 3], 10)]
    assert plan_buckets([4, 4, 4], bucket_overhead=0) == [([0, 1, 2], 4)]  # equal lengths: not split
    # sorted [0, 2, 3, 9, 11]: 4 buckets {0} {2,3} {9} {11} cost 0 + 6 + 9 + 11 = 26 beats the other
    # 4-bucket plans (27, 27, 31) and every 3-bucket plan (best {0} {2,3} {9,11}: 28)
    assert plan_buckets([9, 0, 3, 11, 2], bucket_overhead=0) == [([1], 0), ([4, 2], 3), ([0], 9), ([3], 11)]
    assert plan_buckets([9, 0, 3, 11, 2], max_buckets=2, bucket_overhead=0) == [([1, 4, 2], 3), ([0, 3], 11)]  # 9 + 22 = 31
    # overhead 2: 4 buckets 26 + 8 = 34 ties 3 buckets {0} {2,3} {9,11} 28 + 6 = 34 (fewer wins); 2: 31 + 4
    assert plan_buckets([9, 0, 3, 11, 2], bucket_overhead=2) == [([1], 0), ([4, 2], 3), ([0, 3], 11)]
    assert plan_buckets([]) == []


def test_buckets_equal_full_rows_in_values_and_gradients(tiny_on):
    """On CUDA this also covers the head's per-chunk recompute in the backward pass (token_logprobs)."""
    model, tok = tiny_on
    for g, lengths in RAGGED.items():
        prompts, ids, mask = ragged_batch(tok, lengths, g, device=model.device)
        assert len(plan_buckets(_positions_needed(mask), 4, 0)) >= 3  # several buckets really run
        weights = torch.linspace(-1, 1, ids.numel(), device=model.device).view(ids.shape)
        results = []
        for run in ("buckets", "one bucket", "rows"):
            model.zero_grad()
            if run == "rows":
                lp = rows_forward_logprobs(model, prompts, ids, mask, g)
            else:
                lp = completion_logprobs(model, prompts, ids, mask, g, tok.pad_token_id,
                                         max_buckets=4 if run == "buckets" else 1, bucket_overhead=0)
            (lp * weights).sum().backward()
            results.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
        (lp_a, g_a), *others = results
        assert (lp_a[mask == 0] == 0).all()
        for lp_b, g_b in others:
            assert torch.allclose(lp_a, lp_b, atol=1e-5)
            for a, b in zip(g_a, g_b):
                assert torch.allclose(a, b, atol=1e-5)


def test_buckets_under_gradient_checkpointing_equal_shared_prefix(tiny):
    model, tok = tiny
    prompts, ids, mask = ragged_batch(tok, RAGGED[2], 2)
    model.train()
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_gradient_checkpointing(model)
        model.zero_grad()
        out = completion_forward(model, prompts, ids, mask, 2, tok.pad_token_id, bucket_overhead=0)
        (out.logp * torch.linspace(-1, 1, ids.numel()).view(ids.shape)).sum().backward()
        results.append((out.logp.detach(), out.hidden.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_a, h_a, g_a), (lp_b, h_b, g_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-5) and torch.allclose(h_a, h_b, atol=1e-5)
    for a, b in zip(g_a, g_b):
        assert torch.allclose(a, b, atol=1e-5)


def test_hidden_keeps_its_shape_and_real_states(tiny):
    model, tok = tiny
    prompts, ids, mask = ragged_batch(tok, RAGGED[4], 4)
    with torch.no_grad():
        a = completion_forward(model, prompts, ids, mask, 4, tok.pad_token_id, bucket_overhead=0)
        b = completion_forward(model, prompts, ids, mask, 4, tok.pad_token_id, max_buckets=1)
    assert a.hidden.shape == b.hidden.shape == (8, 12, model.config.hidden_size)
    real = mask.bool()  # hidden[b, t] predicts completion token t; past the last real token it is not used
    assert torch.allclose(a.hidden[real], b.hidden[real], atol=1e-5)
    assert (a.hidden[4, 1:] == 0).all() and (a.hidden[4, 0] != 0).any()  # the empty row runs the prompt only


def test_buckets_compute_fewer_positions(tiny):
    model, tok = tiny
    prompts = [tok("5+5=")["input_ids"]]  # 4 tokens
    ids = torch.randint(3, len(tok), (8, 41), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(41)[None, :] < torch.tensor([2] * 7 + [41])[:, None]).long()
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    try:
        with torch.no_grad():
            for max_buckets, expected in ((MAX_BUCKETS, 4 + 1 * 7 + 40 * 1), (1, 4 + 40 * 8)):
                seen.clear()  # the prompt once, then each row's completion but its last token
                completion_logprobs(model, prompts, ids, mask, 8, tok.pad_token_id, max_buckets=max_buckets)
                assert sum(seen) == expected
    finally:
        hook.remove()


def test_a_bf16_reference_under_autocast_is_the_fp32_reference_exactly(tiny):
    """The bf16 reference holds the values autocast casts an fp32 copy's weights to, so under bf16 autocast
    its log-probs are the fp32 copy's bit for bit, at half the memory of its linear layers; a sync with
    mixup 1 replaces it by the policy's current weights, and nothing else is accepted."""
    import pytest

    from rlvr.config import build_config
    from rlvr.train.forward import Reference, reference_in_bf16, reference_logprobs

    model, tok = tiny
    prompts, r = rollout(model, tok)
    args = (prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id)
    fp32, bf16 = Reference.of(model), Reference.of(model, bf16=True)
    assert bf16.model.lm_head.weight.dtype == torch.bfloat16
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-2)
    at = lambda ref: reference_logprobs(ref, *args, precision="bf16")  # the reference runs under bf16 autocast
    assert torch.equal(at(fp32), at(bf16))
    bf16.sync(model, 1.0)
    moved = at(bf16)
    assert torch.equal(moved, at(Reference.of(model)))
    with pytest.raises(ValueError, match="replaced, not mixed"):
        bf16.sync(model, 0.5)
    algo = lambda *o: build_config(None, list(o)).algo
    assert reference_in_bf16(algo(), "bf16") and not reference_in_bf16(algo(), "no")
    assert not reference_in_bf16(algo("--algo.kl_in=reward"), "bf16")  # compared with an fp32 forward there
    assert not reference_in_bf16(algo("--algo.ref_sync_every=4", "--algo.ref_mixup=0.5"), "bf16")
    assert reference_in_bf16(algo("--algo.ref_sync_every=4"), "bf16")


def test_fused_head_gives_the_chunked_values_and_its_gradients():
    """FusedHeadLogprob (train.lm_head=fused) against the chunked path: log-probs and entropies equal bit for
    bit; gradients of hidden, weight and bias within 1e-6 of the largest in fp32 (the same sums in another
    order) and 1e-2 under bf16 autocast (the chunked path sums the weight's gradient in bf16, the fused one
    in fp32); with an entropy bonus (entropy_grad), a temperature and chunks that do not divide N."""
    from rlvr.train.head import token_logprobs

    torch.manual_seed(0)
    n, h_dim, vocab = 150, 32, 500
    for bf16 in (False, True):
        for temperature, entropy_grad in ((1.0, False), (0.7, True)):
            head = torch.nn.Linear(h_dim, vocab)
            h0, tokens = torch.randn(n, h_dim), torch.randint(0, vocab, (n,))
            g_logp, g_ent = torch.randn(n), torch.randn(n)
            got = []
            for fused in (False, True):
                head.zero_grad()
                h = h0.clone().requires_grad_(True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logp, ent = token_logprobs(h, head, tokens, temperature, chunk=64, with_entropy=True,
                                               entropy_grad=entropy_grad, fused=fused)
                ((logp * g_logp).sum() + ((ent * g_ent).sum() if entropy_grad else 0)).backward()
                got.append((logp.detach(), ent.detach(), h.grad, head.weight.grad.clone(), head.bias.grad.clone()))
            (lp_a, e_a, *grads_a), (lp_b, e_b, *grads_b) = got
            assert torch.equal(lp_a, lp_b) and torch.equal(e_a, e_b)
            tol = 1e-2 if bf16 else 1e-6
            for a, b in zip(grads_a, grads_b):
                assert float((a - b).abs().max()) <= tol * float(a.abs().max())
            assert ent.requires_grad == entropy_grad


def test_lm_head_setting_picks_the_update_s_path(tiny, monkeypatch):
    """train.lm_head=fused runs the update's forward through FusedHeadLogprob (and auto does on CUDA only);
    one step of either path gives the same loss and weights within 1e-6."""
    import copy

    from rlvr.config import Config, OptimizerConfig, TrainConfig
    from rlvr.train import head
    from rlvr.train.batch import Batch
    from rlvr.train.update import policy_update

    assert head.use_fused_head("auto", torch.device("cuda")) and not head.use_fused_head("auto", torch.device("cpu"))
    model, tok = tiny
    prompts, r = rollout(model, tok)
    batch = Batch(prompts=prompts, completion_ids=r.completion_ids, completion_mask=r.completion_mask,
                  advantages=torch.linspace(-1, 1, r.completion_ids.shape[0]), group_size=3)
    calls = []
    apply = head.FusedHeadLogprob.apply
    monkeypatch.setattr(head.FusedHeadLogprob, "apply", lambda *a: calls.append(1) or apply(*a))
    results = []
    for lm_head in ("chunked", "fused"):
        m = copy.deepcopy(model)
        cfg = Config(train=TrainConfig(lm_head=lm_head), optimizer=OptimizerConfig(max_grad_norm=0.0))
        metrics = policy_update(m, torch.optim.SGD(m.parameters(), lr=0.1), batch,
                                update_settings(cfg, tok.pad_token_id, "no"))
        results.append((metrics["loss"], [p.detach() for p in m.parameters()]))
        assert bool(calls) == (lm_head == "fused")
    (loss_a, w_a), (loss_b, w_b) = results
    assert loss_a == loss_b
    for a, b in zip(w_a, w_b):
        assert torch.allclose(a, b, atol=1e-6)
