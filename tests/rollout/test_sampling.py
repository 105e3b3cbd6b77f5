import math

import torch

from rlvr.rollout.sampling import sample_next


def test_greedy_reports_untempered_logprob():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    tok, logp = sample_next(logits, temperature=0.0)
    assert tok.tolist() == [1]
    expected = 3.0 - math.log(math.exp(1) + math.exp(3) + math.exp(2))
    assert math.isclose(float(logp), expected, rel_tol=1e-6)


def test_top_p_keeps_the_nucleus_and_renormalises():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(300):
        tok, logp = sample_next(probs.log(), temperature=1.0, top_p=0.7, generator=g)
        seen.add(int(tok))
        # nucleus {0, 1}: mass before token 2 is 0.8 >= 0.7; renormalised 0.625 / 0.375
        assert math.isclose(float(logp.exp()), [0.625, 0.375][int(tok)], rel_tol=1e-5)
    assert seen == {0, 1}


def test_top_k_and_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    tok, logp = sample_next(logits, temperature=2.0, top_k=2, generator=g)
    z = math.exp(1.0) + math.exp(0.5)  # logits / 2 over the top 2
    assert math.isclose(float(logp.exp()), [math.exp(1.0) / z, math.exp(0.5) / z][int(tok)], rel_tol=1e-5)
    assert int(tok) in (0, 1)


def test_seeded_sampling_is_repeatable():
    logits = torch.randn(4, 50)
    a = sample_next(logits, 1.0, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits, 1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_inverse_cdf_draws_the_distribution_and_never_a_zero_probability_token():
    from rlvr.rollout.sampling import inverse_cdf

    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0]).repeat(20000, 1)  # [N, V]
    draws = inverse_cdf(probs, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs[0], atol=0.015)  # 4 standard errors at N = 20000
    edge = torch.tensor([[0.0, 0.0, 1.0]])  # u = 0 must still land on the only live token
    assert all(int(inverse_cdf(edge, torch.Generator().manual_seed(s))) == 2 for s in range(50))
