"""The policy objectives of rlvr.algo.objectives through rlvr.algo.policy_loss, on tensors small enough to
work out by hand (each value is derived in its comment)."""
import math

import pytest
import torch

from rlvr.algo import aggregate, policy_loss

ONE_ROW = torch.ones(1, 4)


def grad_of(loss, x):
    return torch.autograd.grad(loss, x)[0]


def test_cispo_clips_the_weight_but_every_token_keeps_its_gradient():
    logp = torch.tensor([[1.5, 0.5, 1.1, 0.9]]).log().requires_grad_()
    loss, m = policy_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), ONE_ROW, 0.2, 0.2, objective="cispo")
    # weights sg[clip(r, 0.8, 1.2)] = 1.2, 0.8, 1.1, 0.9; loss -w log r:
    # -1.2 ln 1.5 = -0.486558, -0.8 ln 0.5 = 0.554518, -1.1 ln 1.1 = -0.104841, -0.9 ln 0.9 = 0.094825:
    # sum 0.057943, token mean 0.014486
    expected = (-1.2 * math.log(1.5) - 0.8 * math.log(0.5) - 1.1 * math.log(1.1) - 0.9 * math.log(0.9)) / 4
    assert math.isclose(float(loss), expected, rel_tol=1e-6) and math.isclose(expected, 0.014486, abs_tol=1e-6)
    # d/d logp = -w A / 4: the clipped tokens 0 and 1 still move (the clipped surrogate gives them 0)
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-0.3, -0.2, -0.275, -0.225]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 0.5)


def test_sapo_gate_values_and_its_unit_slope_at_ratio_one():
    logp = torch.tensor([[1.5, 0.5]]).log()
    adv = torch.tensor([[1.0, -1.0]])
    loss, _ = policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), objective="sapo",
                          params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})
    # A = 1, tau 1: -sigmoid(0.5) * 4 = -0.622459 * 4 = -2.489837
    # A = -1, tau 1.05: +sigmoid(1.05 * -0.5) * 4 / 1.05 = 0.371684 * 3.809524 = 1.415939; mean -0.536949
    pos = -4 / (1 + math.exp(-0.5))
    neg = 4 / 1.05 / (1 + math.exp(0.525))
    assert math.isclose(float(loss), (pos + neg) / 2, rel_tol=1e-6) and math.isclose((pos + neg) / 2, -0.536949,
                                                                                      abs_tol=1e-6)
    # at r = 1 the gate's slope is tau * 1/4 * 4 / tau = 1: the plain policy gradient -A / n per token
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), objective="sapo")
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-0.5, 0.5]]))


def test_gmpo_geometric_mean_with_its_log_space_clip():
    logp = torch.tensor([[0.5, -0.5, 0.1]], requires_grad=True)
    mask = torch.ones(1, 3)
    loss, m = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask, 0.4, 0.4, objective="gmpo",
                          aggregation="seq-mean-token-mean")
    # A > 0: min(log r, clip(log r, -0.4, 0.4)) = 0.4, -0.5, 0.1 -> mean 0 -> ratio 1 -> loss -1
    assert math.isclose(float(loss), -1.0, rel_tol=1e-6)
    # d/d logp_t = -A * ratio / 3 where the clip did not bind: token 0 (clipped at 0.4) gets none
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[0.0, -1 / 3, -1 / 3]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 2 / 3, rel_tol=1e-6)  # tokens 0 and 1 are outside the band
    loss, _ = policy_loss(logp, torch.zeros(1, 3), torch.tensor([-1.0]), mask, 0.4, 0.4, objective="gmpo",
                          aggregation="seq-mean-token-mean")
    # A < 0: max(log r, clip) = 0.5, -0.4, 0.1 -> mean 0.2 / 3 -> loss = exp(0.066667) = 1.068939
    assert math.isclose(float(loss), math.exp(0.2 / 3), rel_tol=1e-6)


def test_gpg_is_the_plain_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach() + 5, torch.tensor([2.0]), torch.ones(1, 2), objective="gpg")
    # -A log pi = 2, 4 -> token mean 3, whatever the old policy; gradient -A / 2 = -1 per token
    assert math.isclose(float(loss), 3.0)
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-1.0, -1.0]]))


def test_clip_cov_drops_the_high_covariance_tokens():
    logp = torch.tensor([[-1.0, -3.0, -2.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    loss, m = policy_loss(logp, logp.detach(), adv, ONE_ROW, objective="clip_cov",
                          params={"cov_ratio": 0.5, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0})
    # mean A 0, mean log pi -2: covariances 2*1, -2*-1, 0, 0 -> tokens 0 and 1 lie in (1, 5), and
    # max(1, int(0.5 * 4)) = 2 are dropped: both. Loss at r = 1: -A = 0, 0, -2, 2 -> mean 0
    assert float(loss) == 0.0
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[0.0, 0.0, -0.5, 0.5]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 0.5)


def test_kl_cov_penalises_the_top_covariance_token():
    logp = torch.tensor([[-1.0, -3.5, -2.0, -1.5]], requires_grad=True)
    adv = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    loss, m = policy_loss(logp, logp.detach() - 0.1, adv, ONE_ROW, objective="kl_cov",
                          params={"cov_ratio": 0.25, "kl_cov_coef": 1.0})
    # mean A 0, mean log pi -2: covariances 2, 3, 0, -1; top max(1, int(0.25 * 4)) = 1: token 1 gets +|0.1|.
    # -A r with r = e^0.1 cancels over the four tokens: (0.1) / 4 = 0.025
    assert math.isclose(float(loss), 0.025, rel_tol=1e-5)
    r = math.exp(0.1)
    # gradient -A r / 4, plus sign(0.1) / 4 on token 1
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-2 * r, 2 * r + 1, -2 * r, 2 * r]]) / 4)
    assert math.isclose(float(m["objective/clipped_frac"]), 0.25)


def test_vespo_gamma_weight_of_the_sequence_ratio():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = logp.detach() - torch.tensor([[0.1, 0.2]])
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), objective="vespo")
    # w = e^0.3 = 1.349859; A >= 0: k 2, lambda 3: log phi = 3 + 2 * 0.3 - 3 * 1.349859 = -0.449576,
    # phi = 0.637898; loss -phi A log pi = 0.637898, 1.275797 -> mean 0.956847; gradient -phi / 2
    phi = math.exp(3 + 0.6 - 3 * math.exp(0.3))
    assert math.isclose(phi, 0.637898, abs_tol=1e-6)
    assert math.isclose(float(loss), 1.5 * phi, rel_tol=1e-6)
    assert torch.allclose(grad_of(loss, logp), torch.full((1, 2), -phi / 2))
    # phi(1) = e^(lambda - lambda) = 1: at the old policy VESPO is the plain policy gradient
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([-1.0]), torch.ones(1, 2), objective="vespo")
    assert math.isclose(float(loss), (-1.0 - 2.0) / 2, rel_tol=1e-6)


def test_seq_mean_token_sum_is_luspo_s_aggregation():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # sequence sums 6 and 4 -> mean 5 (the masked 9s never count)
    assert float(aggregate(loss, mask, "seq-mean-token-sum")) == 5.0


def test_sampler_weights_and_keep_multiply_the_token_losses():
    logp = torch.zeros(1, 2)
    loss, _ = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), objective="ppo",
                          sampler_w=torch.tensor([[2.0, 0.5]]), keep=torch.tensor([[1.0, 0.0]]))
    # ratio 1: -A = -1 per token, times 2 and 0.5, times keep 1 and 0 -> (-2 + 0) / 2
    assert float(loss) == -1.0


def test_the_sequence_ratio_composes_only_with_the_objectives_that_define_it():
    x = torch.zeros(1, 2)
    for objective in ("gmpo", "gpg", "clip_cov", "kl_cov", "vespo"):
        with pytest.raises(ValueError, match="set algo.ratio_level=token"):
            policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), ratio_level="sequence", objective=objective)
    with pytest.raises(ValueError, match="algo.policy_loss must be one of"):
        policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), objective="grpo")
