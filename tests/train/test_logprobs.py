import torch

from rlvr.models import checkpointing_active, enable_gradient_checkpointing
from rlvr.rollout.engine import generate
from rlvr.train.logprobs import completion_logprobs


def rollout(model, tok, temperature=1.0):
    prompts = [tok("5+5=")["input_ids"], tok("9*9")["input_ids"], tok("1")["input_ids"]]
    r = generate(model, prompts, group_size=3, max_new_tokens=10, temperature=temperature,
                 stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    return prompts, r


def full_forward_logprobs(model, prompts, r, g, temperature=1.0):
    """Reference: each prompt + completion run alone, unpadded, no cache sharing."""
    out = torch.zeros(r.completion_ids.shape)
    for b in range(out.shape[0]):
        p, n = prompts[b // g], int(r.completion_mask[b].sum())
        c = r.completion_ids[b, :n].tolist()
        logp = (model(torch.tensor([p + c])).logits[0] / temperature).log_softmax(-1)
        for t in range(n):
            out[b, t] = logp[len(p) + t - 1, c[t]]
    return out


def test_shared_prefix_equals_full_forward(tiny):
    model, tok = tiny
    prompts, r = rollout(model, tok)
    lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id)
    assert torch.allclose(lp, full_forward_logprobs(model, prompts, r, 3), atol=1e-5)


def test_sampler_logprobs_match_training_forward(tiny):
    model, tok = tiny
    for temperature in (1.0, 0.7):
        prompts, r = rollout(model, tok, temperature)
        lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id,
                                 temperature)
        assert torch.allclose(lp, r.sampler_logp, atol=1e-5)


def test_shared_prefix_gradient_equals_full(tiny):
    model, tok = tiny
    prompts, r = rollout(model, tok)
    completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id).sum().backward()
    shared = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full_forward_logprobs(model, prompts, r, 3).sum().backward()
    for a, p in zip(shared, model.parameters()):
        assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-4)


def test_gradient_checkpointing_runs_full_rows_with_equal_values_and_gradients(tiny):
    model, tok = tiny
    prompts, r = rollout(model, tok)
    model.train()
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_gradient_checkpointing(model)  # transformers then drops the cache: full rows are run
        assert checkpointing_active(model) == checkpointing
        model.zero_grad()
        lp = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 3, tok.pad_token_id)
        (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
        results.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_a, g_a), (lp_b, g_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-5)
    for a, b in zip(g_a, g_b):
        assert torch.allclose(a, b, atol=1e-5)
    with torch.no_grad():  # no backward to replay: the shared-prefix path again
        assert not checkpointing_active(model)
