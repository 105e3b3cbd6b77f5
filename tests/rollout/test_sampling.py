import math

import torch

from rlvr.rollout.sampling import group_seed, inverse_cdf, sample_next, uniforms


def test_greedy_reports_untempered_logprob():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    tok, logp = sample_next(logits, temperature=0.0)
    assert tok.tolist() == [1]
    expected = 3.0 - math.log(math.exp(1) + math.exp(3) + math.exp(2))
    assert math.isclose(float(logp), expected, rel_tol=1e-6)


def test_top_p_keeps_the_nucleus_and_renormalises():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    seen = set()
    for u in torch.rand(300, 1, generator=torch.Generator().manual_seed(0)):
        tok, logp = sample_next(probs.log(), temperature=1.0, top_p=0.7, u=u)
        seen.add(int(tok))
        # nucleus {0, 1}: mass before token 2 is 0.8 >= 0.7; renormalised 0.625 / 0.375
        assert math.isclose(float(logp.exp()), [0.625, 0.375][int(tok)], rel_tol=1e-5)
    assert seen == {0, 1}


def test_top_k_and_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    tok, logp = sample_next(logits, temperature=2.0, top_k=2, u=torch.tensor([0.9]))
    z = math.exp(1.0) + math.exp(0.5)  # logits / 2 over the top 2
    assert math.isclose(float(logp.exp()), [math.exp(1.0) / z, math.exp(0.5) / z][int(tok)], rel_tol=1e-5)
    assert int(tok) == 1  # u = 0.9 lies past token 0's mass e / z = 0.62


def test_a_row_s_token_depends_on_its_own_draw_only():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(3))
    u = torch.rand(4, generator=torch.Generator().manual_seed(4))
    whole = sample_next(logits, 1.0, u=u)
    rows = [sample_next(logits[i:i + 1], 1.0, u=u[i:i + 1]) for i in range(4)]
    assert torch.equal(whole[0], torch.cat([t for t, _ in rows]))


def test_group_seeds_are_stable_and_distinct():
    assert group_seed(0, 1, 0) == group_seed(0, 1, 0)
    seeds = {group_seed(s, step, g) for s in range(3) for step in range(3) for g in range(8)}
    assert len(seeds) == 72 and all(0 <= x < 2**63 for x in seeds)
    u = uniforms(4, 5, 2, [group_seed(0, 1, 0), group_seed(0, 1, 1)])
    assert torch.equal(u[2:], uniforms(2, 5, 2, [group_seed(0, 1, 1)]))  # a group's draws are its own


def test_inverse_cdf_draws_the_distribution_and_never_a_zero_probability_token():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0]).repeat(20000, 1)  # [N, V]
    draws = inverse_cdf(probs, torch.rand(20000, generator=torch.Generator().manual_seed(0)))
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs[0], atol=0.015)  # 4 standard errors at N = 20000
    edge = torch.tensor([[0.0, 0.0, 1.0]])  # u = 0 must still land on the only live token
    assert int(inverse_cdf(edge, torch.zeros(1))) == 2
    assert [int(inverse_cdf(probs[:1], torch.tensor([u]))) for u in (0.0, 0.49, 0.5, 0.79, 0.8, 0.999)] == [1, 1, 3, 3, 4, 4]


def test_inverse_cdf_in_blocks_matches_one_cumulative_sum_across_block_edges():
    g = torch.Generator().manual_seed(1)
    weights = torch.rand(64, 1000, generator=g, dtype=torch.float64)  # 1000: not a multiple of the block
    weights[:, 256:512] = 0.0  # a whole dead block
    weights[:, 700:] = 0.0  # a dead tail, past a block edge
    u = torch.rand(64, generator=g, dtype=torch.float64)
    cum = weights.cumsum(-1)
    expected = torch.searchsorted(cum, u[:, None] * cum[:, -1:], right=True).squeeze(-1)
    assert torch.equal(inverse_cdf(weights, u), expected)
    top = torch.full((64,), 1 - 2**-24, dtype=torch.float64)  # the top end lands on the last live token
    assert inverse_cdf(weights, top).tolist() == [699] * 64


def test_sample_next_log_prob_is_the_tempered_log_softmax_of_the_drawn_token():
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(2))
    tok, logp = sample_next(logits, 0.7, u=torch.linspace(0.05, 0.95, 8))
    assert torch.allclose(logp, torch.log_softmax(logits / 0.7, -1).gather(-1, tok[:, None]).squeeze(-1), atol=1e-5)
    tok, logp = sample_next(logits, 0.0)
    assert torch.allclose(logp, torch.log_softmax(logits, -1).max(-1).values, atol=1e-5)
