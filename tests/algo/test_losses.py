import math

import pytest
import torch

from rlvr.algo import (AGGREGATIONS, aggregate, drop_nonfinite, kl_estimate, loss_units, policy_loss, tis_weights,
                       value_loss)

RATIOS = torch.tensor([[1.5, 0.5, 1.1, 0.9]])


def test_clipped_surrogate_hand_computed():
    old, logp, mask = torch.zeros(1, 4), RATIOS.log(), torch.ones(1, 4)
    loss, m = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.2)
    # A = 1: max(-r, -clip(r)) per token = -1.2, -0.5, -1.1, -0.9 -> token mean -0.925
    assert math.isclose(float(loss), -0.925, rel_tol=1e-6)
    assert math.isclose(float(m["clip/high_frac"]), 0.25) and float(m["clip/low_frac"]) == 0.0
    assert math.isclose(float(m["ratio/max"]), 1.5, rel_tol=1e-6) and math.isclose(float(m["ratio/min"]), 0.5, rel_tol=1e-6)
    loss, m = policy_loss(logp, old, torch.tensor([-2.0]), mask, clip_low=0.2, clip_high=0.2)
    # A = -2: 3.0, 1.6, 2.2, 1.8 -> 2.15
    assert math.isclose(float(loss), 2.15, rel_tol=1e-6)
    assert math.isclose(float(m["clip/low_frac"]), 0.25)


def test_asymmetric_clip_and_per_token_advantages():
    old, logp, mask = torch.zeros(1, 4), RATIOS.log(), torch.ones(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, _ = policy_loss(logp, old, adv, mask, clip_low=0.1, clip_high=0.28)
    # -min(1.5, 1.28), -min(0.5, 0.5), max(1.1, 1.1), max(0.9, 0.9) -> -1.28 -0.5 1.1 0.9
    assert math.isclose(float(loss), (-1.28 - 0.5 + 1.1 + 0.9) / 4, rel_tol=1e-6)


def test_dual_clip_bounds_negative_advantage_loss():
    logp = torch.tensor([[5.0, 1.0]]).log()
    loss, m = policy_loss(logp, torch.zeros(1, 2), torch.tensor([-2.0]), torch.ones(1, 2), dual_clip=3.0)
    # max(2r, 2 clip(r)) = 10, 2; bounded by -A c = 6 -> 6, 2
    assert math.isclose(float(loss), 4.0, rel_tol=1e-6)
    assert math.isclose(float(m["clip/dual_frac"]), 0.5)


def test_gradient_zero_when_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    loss, _ = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), aggregation="token-mean")
    loss.backward()
    # token 0 is clipped (no gradient); token 1: d(-r)/dlogp = -r = -1, over 2 tokens
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5]]))


def test_gspo_ratio_value_and_gradient():
    logp = torch.tensor([[0.02, 0.04, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, m = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask, ratio_level="sequence",
                          aggregation="seq-mean-token-mean")
    s = math.exp(0.03)  # exp(mean of the two unmasked log-ratios); the masked token is ignored
    assert math.isclose(float(loss), -s, rel_tol=1e-6)
    assert math.isclose(float(m["ratio/mean"]), s, rel_tol=1e-6)
    loss.backward()
    # d(-s)/d logp_t = -s / |y| for each unmasked token, as in sequence-level GSPO
    assert torch.allclose(logp.grad, torch.tensor([[-s / 2, -s / 2, 0.0]]), atol=1e-6)


def test_aggregations_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert math.isclose(float(aggregate(loss, mask, "token-mean")), 10 / 4)
    # sequence means 2 and 4; the empty third sequence is left out
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-mean")), 3.0)
    # sums 6 and 4 over T = 3, mean over the 2 sequences with tokens (the empty one is not counted)
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-sum-norm")), (2 + 4 / 3) / 2, rel_tol=1e-6)
    assert math.isclose(float(aggregate(loss, mask, "seq-mean-token-sum-norm", norm_length=2)), 5 / 2, rel_tol=1e-6)
    empty = torch.zeros(2, 3)
    for mode in AGGREGATIONS:
        assert float(aggregate(loss[:2], empty, mode)) == 0.0


def test_loss_units_and_parts_summing_to_the_whole():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0], [5.0, 7.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert float(loss_units(mask, "token-mean")) == 6.0
    assert float(loss_units(mask, "seq-mean-token-mean")) == 3.0  # the empty row is not a unit
    assert float(loss_units(mask, "seq-mean-token-sum-norm")) == 3.0
    # token-mean of the whole: (6 + 4 + 12) / 6; two halves given the whole's units sum to it
    for mode, whole in (("token-mean", 22 / 6), ("seq-mean-token-mean", (2 + 4 + 6) / 3),
                        ("seq-mean-token-sum-norm", (6 + 4 + 12) / 3 / 3)):
        assert math.isclose(float(aggregate(loss, mask, mode)), whole, rel_tol=1e-6)
        units = loss_units(mask, mode)
        parts = aggregate(loss[:2], mask[:2], mode, units=units) + aggregate(loss[2:], mask[2:], mode, units=units)
        assert math.isclose(float(parts), whole, rel_tol=1e-6)


def test_value_loss_clipping():
    # unclipped error 0; clipped value 0.2 -> (0.2 - 1)^2 = 0.64; 0.5 * max = 0.32
    v = value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1), clip=0.2)
    assert math.isclose(float(v), 0.32, rel_tol=1e-6)
    v = value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1), clip=None)
    assert float(v) == 0.0


def test_kl_estimators():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.25) - math.log(0.5)  # ref - logp = -log 2
    assert math.isclose(float(kl_estimate(logp, ref, "k1")), -d, rel_tol=1e-6)
    assert math.isclose(float(kl_estimate(logp, ref, "k2")), d * d / 2, rel_tol=1e-6)
    assert math.isclose(float(kl_estimate(logp, ref, "k3")), 0.5 + math.log(2) - 1, rel_tol=1e-5)
    assert float(kl_estimate(ref, ref, "k3")) == 0.0


def test_tis_weights_hand_values():
    trainer = torch.tensor([[-1.0, -0.5, -2.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -1.5, -1.0], [-4.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w = tis_weights(trainer, sampler, mask, cap=2.0)
    expected = torch.tensor([[1.0, 2.0, math.exp(-1.0)], [2.0, 1.0, 0.0]])  # e^1 and e^3 capped at 2
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-6)
    assert not w.requires_grad
    torch.testing.assert_close(tis_weights(trainer, sampler, mask, cap=10.0)[0, 1], torch.tensor(math.e))
    with pytest.raises(ValueError, match="cap must be > 0"):
        tis_weights(trainer, sampler, mask, cap=0.0)


# ---- guarded importance ratios: a -inf sampler log-prob or a huge gap never reaches the loss as inf

def test_huge_log_ratio_is_clamped_before_exp():
    # log r = 100: exp overflows float32 to inf; clamped to 20, a negative-advantage token's loss is
    # max(-A r, -A clip(r)) = -(-1) * e^20 (token-mean over one token)
    logp, old, mask = torch.tensor([[100.0]], requires_grad=True), torch.zeros(1, 1), torch.ones(1, 1)
    loss, m = policy_loss(logp, old, torch.tensor([-1.0]), mask, aggregation="token-mean")
    assert math.isclose(float(loss), math.exp(20.0), rel_tol=1e-6)
    assert math.isclose(float(m["ratio/max"]), math.exp(20.0), rel_tol=1e-6)
    loss.backward()
    assert float(logp.grad) == 0.0  # past the clamp there is no gradient to follow
    # the sequence ratio: mean log r over the two tokens = (100 + 0) / 2 = 50, clamped to 20
    logp2 = torch.tensor([[100.0, 0.0]])
    loss, m = policy_loss(logp2, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2), ratio_level="sequence",
                          aggregation="token-mean")
    assert math.isclose(float(loss), math.exp(20.0), rel_tol=1e-6)


def test_tis_weight_of_a_non_finite_sampler_token_is_zero():
    trainer = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-float("inf"), float("nan"), -1.5, -1.0]])
    mask = torch.ones(1, 4)
    w = tis_weights(trainer, sampler, mask, cap=2.0)
    expected = torch.tensor([[0.0, 0.0, math.exp(0.5), 1.0]])
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-6)
    # a huge finite gap is capped without overflow: exp(1e4) would be inf before min(., cap)
    w = tis_weights(torch.tensor([[0.0, -1e4]]), torch.tensor([[-1e4, 0.0]]), torch.ones(1, 2), cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, math.exp(-20.0)]]), rtol=1e-6, atol=0)


def test_drop_nonfinite_moves_tokens_from_the_loss_to_the_context():
    sampler = torch.tensor([[-1.0, -float("inf"), -2.0], [float("nan"), -1.0, -float("inf")]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 1's last token is padding: not counted
    new_mask, context, clean, dropped = drop_nonfinite(sampler, mask, None)
    torch.testing.assert_close(new_mask, torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]), rtol=0, atol=0)
    torch.testing.assert_close(context, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), rtol=0, atol=0)
    torch.testing.assert_close(clean, torch.tensor([[-1.0, 0.0, -2.0], [0.0, -1.0, 0.0]]), rtol=0, atol=0)
    assert int(dropped) == 2
    env = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # an environment token stays context
    _, context, _, _ = drop_nonfinite(sampler, mask, env)
    torch.testing.assert_close(context, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]), rtol=0, atol=0)
    finite = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    same_mask, none, same, zero = drop_nonfinite(finite, mask, None)
    assert same_mask is mask and none is None and same is finite and int(zero) == 0
