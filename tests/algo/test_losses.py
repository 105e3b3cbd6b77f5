import math

import torch

from rlvr.algo import aggregate, kl_estimate, policy_loss


def test_clipped_surrogate_hand_computed():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.9]]))  # ratios 1.5, 0.5, 1.1, 0.9
    mask = torch.ones(1, 4)
    loss, m = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.2)
    # A = 1: max(-r, -clip(r)) = -min(r, clip(r)) -> -1.2, -0.5, -1.1, -0.9
    assert torch.allclose(loss, torch.tensor([[-1.2, -0.5, -1.1, -0.9]]), atol=1e-6)
    assert math.isclose(float(m["clip/high_frac"]), 0.25)
    assert math.isclose(float(m["clip/low_frac"]), 0.0)
    loss, m = policy_loss(logp, old, torch.tensor([-2.0]), mask, clip_low=0.2, clip_high=0.2)
    # A = -2: max(2r, 2 clip(r)) -> 3.0, 1.6, 2.2, 1.8
    assert torch.allclose(loss, torch.tensor([[3.0, 1.6, 2.2, 1.8]]), atol=1e-6)
    assert math.isclose(float(m["clip/low_frac"]), 0.25)


def test_gradient_zero_when_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    loss, _ = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.sum().backward()
    # token 0 is clipped (no gradient); token 1 has d(-r)/dlogp = -r = -1
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -1.0]]))


def test_aggregations_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert math.isclose(float(aggregate(loss, mask, "token-mean")), 10 / 4)
    # sequence means 2 and 4; the empty third sequence is left out
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-mean")), 3.0)
    # sums 6, 4, 0 over T = 3, mean over 3 sequences
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-sum-norm")), (2 + 4 / 3 + 0) / 3, rel_tol=1e-6)
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-sum-norm", norm_length=2)), (3 + 2 + 0) / 3, rel_tol=1e-6)


def test_kl_estimators():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.25) - math.log(0.5)  # ref - logp = -log 2
    assert math.isclose(float(kl_estimate(logp, ref, "k1")), -d, rel_tol=1e-6)
    assert math.isclose(float(kl_estimate(logp, ref, "k2")), d * d / 2, rel_tol=1e-6)
    assert math.isclose(float(kl_estimate(logp, ref, "k3")), 0.5 + math.log(2) - 1, rel_tol=1e-5)
    assert float(kl_estimate(ref, ref, "k3")) == 0.0
