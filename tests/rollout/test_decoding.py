import torch

from rlvr.rollout.decoding import left_pad
from rlvr.rollout.builtin import generate


def prompts_for(tok):
    return [tok("12+3=")["input_ids"], tok("7*8=?")["input_ids"][:3]]


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_groups_stop_and_shapes(tiny):
    model, tok = tiny
    stop = tok.eos_token_id
    r = generate(model, prompts_for(tok), group_size=3, max_new_tokens=12, temperature=1.0,
                 stop_ids=[stop], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    assert r.completion_ids.shape[0] == 6 and r.completion_ids.shape[1] <= 12
    for row, mask, trunc in zip(r.completion_ids.tolist(), r.completion_mask.tolist(), r.truncated.tolist()):
        n = int(sum(mask))
        assert mask == [1.0] * n + [0.0] * (len(mask) - n)
        if trunc:
            assert stop not in row[:n] and n == 12
        else:
            assert row[n - 1] == stop and stop not in row[:n - 1]
    assert torch.all(r.sampler_logp[r.completion_mask == 0] == 0)


def test_greedy_matches_unbatched_argmax(tiny):
    model, tok = tiny
    prompts = prompts_for(tok)
    r = generate(model, prompts, group_size=1, max_new_tokens=6, temperature=0.0,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    for p, row, mask in zip(prompts, r.completion_ids.tolist(), r.completion_mask.tolist()):
        seq = list(p)
        for t in range(int(sum(mask))):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            assert nxt == row[t]
            seq.append(nxt)


def test_seeded_generation_is_deterministic(tiny):
    model, tok = tiny
    kw = dict(group_size=4, max_new_tokens=8, temperature=1.0, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    a = generate(model, prompts_for(tok), generator=torch.Generator().manual_seed(1), **kw)
    b = generate(model, prompts_for(tok), generator=torch.Generator().manual_seed(1), **kw)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.sampler_logp, b.sampler_logp)


def test_a_shared_prompt_prefix_is_prefilled_once_with_the_same_result(tiny_on):
    from rlvr.rollout.decoding import common_prefix_length, prefill

    model, tok = tiny_on
    head = tok("You are a careful calculator. Question: ")["input_ids"]
    prompts = [head + tok(q)["input_ids"] for q in ("1+1=", "12*3=", "7")]
    assert common_prefix_length(prompts) >= len(head)
    with torch.no_grad():
        shared, mask = prefill(model, prompts, tok.pad_token_id)
        plain, plain_mask = prefill(model, prompts, tok.pad_token_id, min_shared=10**9)
    assert torch.allclose(shared.logits[:, -1], plain.logits[:, -1], atol=1e-5)
    assert mask.sum(-1).tolist() == plain_mask.sum(-1).tolist() == [len(p) for p in prompts]
    kw = dict(group_size=2, max_new_tokens=5, temperature=0.0, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    together = generate(model, prompts, **kw).completion_token_lists()  # prefix shared
    alone = [c for p in prompts for c in generate(model, [p], **kw).completion_token_lists()]  # one prompt: no sharing
    assert together == alone
