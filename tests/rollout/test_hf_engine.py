import torch

from rlvr.rollout import builtin
from rlvr.rollout.hf_engine import hf_generate
from rlvr.train.forward import completion_logprobs


def prompts_for(tok):
    return [tok("12+3=")["input_ids"], tok("7*8=?")["input_ids"][:3]]  # ragged: left padding is exercised


def digit_stops(tok):
    """eos plus the ten digits, so that with a random model some rows stop and some are truncated."""
    return [tok.eos_token_id] + [tok.convert_tokens_to_ids(str(d)) for d in range(10)]


def test_shapes_masks_and_truncation(tiny):
    model, tok = tiny
    stops = digit_stops(tok)
    r = hf_generate(model, prompts_for(tok), group_size=4, max_new_tokens=10, temperature=1.0,
                 stop_ids=stops, pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    assert r.group_size == 4 and len(r.prompt_ids) == 2
    assert r.completion_ids.shape == r.completion_mask.shape == r.sampler_logp.shape
    assert r.completion_ids.shape[0] == 8 and r.completion_ids.shape[1] <= 10
    assert 0 < int(r.truncated.sum()) < 8  # both kinds of row occur with this seed
    for row, mask, trunc in zip(r.completion_ids.tolist(), r.completion_mask.tolist(), r.truncated.tolist()):
        n = int(sum(mask))
        assert mask == [1.0] * n + [0.0] * (len(mask) - n)
        assert all(t == tok.pad_token_id for t in row[n:])
        if trunc:
            assert n == 10 and not set(row[:n]) & set(stops)
        else:
            assert row[n - 1] in stops and not set(row[:n - 1]) & set(stops)
    assert torch.all(r.sampler_logp[r.completion_mask == 0] == 0)
    assert torch.all(r.sampler_logp[r.completion_mask == 1] < 0)


def test_sampler_logprobs_match_training_forward(tiny):
    model, tok = tiny
    r = hf_generate(model, prompts_for(tok), group_size=3, max_new_tokens=12, temperature=1.0,
                 stop_ids=digit_stops(tok), pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(1))
    train = completion_logprobs(model, r.prompt_ids, r.completion_ids, r.completion_mask, r.group_size,
                                tok.pad_token_id)
    assert r.completion_mask.sum() > 12
    assert torch.allclose(r.sampler_logp, train, atol=1e-4, rtol=0)


def test_logprobs_are_under_the_processed_distribution(tiny):
    """temperature 0.7 and top-k 5: log p = log_softmax over the 5 best logits / 0.7, recomputed here
    from an unbatched forward of each prompt + completion."""
    model, tok = tiny
    prompts = prompts_for(tok)
    r = hf_generate(model, prompts, group_size=2, max_new_tokens=6, temperature=0.7, top_k=5,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(2))
    for b, (row, mask) in enumerate(zip(r.completion_ids.tolist(), r.completion_mask.tolist())):
        n, prompt = int(sum(mask)), prompts[b // 2]
        logits = model(torch.tensor([prompt + row[:n]])).logits[0, len(prompt) - 1:len(prompt) - 1 + n] / 0.7
        kth = logits.topk(5, dim=-1).values[:, -1:]  # [n, 1]
        expected = logits.masked_fill(logits < kth, float("-inf")).log_softmax(-1)
        expected = expected.gather(-1, torch.tensor(row[:n])[:, None]).squeeze(-1)
        assert torch.allclose(r.sampler_logp[b, :n], expected, atol=1e-4, rtol=0)


def test_greedy_matches_builtin_engine(tiny):
    model, tok = tiny
    kw = dict(group_size=2, max_new_tokens=8, temperature=0.0, stop_ids=digit_stops(tok), pad_id=tok.pad_token_id)
    hf, ours = hf_generate(model, prompts_for(tok), **kw), builtin.generate(model, prompts_for(tok), **kw)
    assert torch.equal(hf.completion_ids, ours.completion_ids)
    assert torch.equal(hf.completion_mask, ours.completion_mask)
    assert torch.equal(hf.truncated, ours.truncated)
    assert torch.allclose(hf.sampler_logp, ours.sampler_logp, atol=1e-5, rtol=0)


def test_seeded_generation_repeats_and_leaves_global_rng_alone(tiny):
    model, tok = tiny
    kw = dict(group_size=4, max_new_tokens=8, temperature=1.0, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    state = torch.random.get_rng_state()
    a = hf_generate(model, prompts_for(tok), generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = hf_generate(model, prompts_for(tok), generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.sampler_logp, b.sampler_logp)
