import pytest
import torch

from rlvr.algo import (estimate_advantages, gpg_advantages, group_advantages, last_token_mask, opo_advantages,
                       passk_advantages, present_tokens, row_widths)


def test_group_scale_hand_computed():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 3.0]])
    # group 1: mean 0.5, unbiased std sqrt(1/3) = 0.57735; group 2: mean 0.75, std 1.5
    expected = torch.tensor([[0.866025, -0.866025, -0.866025, 0.866025], [-0.5, -0.5, -0.5, 1.5]])
    assert torch.allclose(group_advantages(r, "group", eps=0.0), expected, atol=1e-5)


def test_equal_rewards_give_zero():
    r = torch.tensor([[0.2, 0.2, 0.2]])
    assert torch.equal(group_advantages(r, "group"), torch.zeros(1, 3))


def test_none_and_batch_scale():
    r = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    assert torch.allclose(group_advantages(r, "none"), torch.tensor([[0.5, -0.5], [0.0, 0.0]]))
    # batch std of [1, 0, 2, 2] (unbiased) = 0.957427
    assert torch.allclose(group_advantages(r, "batch", eps=0.0),
                          torch.tensor([[0.522233, -0.522233], [0.0, 0.0]]), atol=1e-5)


def test_group_of_one_is_zero():
    assert torch.equal(group_advantages(torch.tensor([[3.0], [1.0]])), torch.zeros(2, 1))


from rlvr.algo import gae, rloo_advantages, token_returns, whiten  # noqa: E402


def test_rloo_hand_computed():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    # r_i - mean of the other three: 1 - 1/3, 0 - 2/3
    assert torch.allclose(rloo_advantages(r), torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]))
    assert torch.equal(rloo_advantages(torch.ones(2, 3)), torch.zeros(2, 3))


def test_gae_hand_computed():
    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]])
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[0.5, 0.4, 0.3]]))
    assert torch.allclose(ret, torch.ones(1, 3))
    # lam 0.5: deltas 0.1, 0.1, 0.3 -> A2 = 0.3, A1 = 0.1 + 0.15, A0 = 0.1 + 0.125
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=0.5)
    assert torch.allclose(adv, torch.tensor([[0.225, 0.25, 0.3]]))
    assert torch.allclose(ret, torch.tensor([[0.725, 0.85, 1.0]]))


def test_gae_skips_masked_tokens():
    adv, ret = gae(torch.tensor([[0.0, 9.0, 1.0]]), torch.tensor([[0.5, 9.0, 0.7]]), torch.tensor([[1.0, 0.0, 1.0]]),
                   gamma=1.0, lam=0.5)
    # the middle token is skipped: delta0 = 0 + 0.7 - 0.5 = 0.2; A0 = 0.2 + 0.5 * 0.3
    assert torch.allclose(adv, torch.tensor([[0.35, 0.0, 0.3]]))
    assert torch.allclose(ret, torch.tensor([[0.85, 0.0, 1.0]]))


def test_token_returns_and_whiten():
    ret = token_returns(torch.tensor([2.0]), torch.tensor([[-0.1, -0.2, -0.3, 5.0]]), torch.tensor([[1.0, 1, 1, 0]]))
    assert torch.allclose(ret, torch.tensor([[1.4, 1.5, 1.7, 0.0]]))
    w = whiten(torch.tensor([[1.0, 2.0, 3.0, 100.0]]), torch.tensor([[1.0, 1, 1, 0]]), eps=0.0)
    assert torch.allclose(w, torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))


def test_token_returns_carry_across_an_environment_span():
    # a multi-turn row: a model turn (tokens 0, 1), the environment's span (2, 3: mask 0), a model turn (4);
    # reward 1 at token 4, token rewards -0.1 -0.2 . . -0.3 (the 9s sit under the mask and never count),
    # gamma 0.5. From the end: 4: -0.3 + 1 = 0.7; 3, 2: skipped, 0.7 carried (no reset, no discount);
    # 1: -0.2 + 0.5 * 0.7 = 0.15; 0: -0.1 + 0.5 * 0.15 = -0.025. Row 2: trailing padding, reward 2.
    mask = torch.tensor([[1.0, 1, 0, 0, 1], [1.0, 1, 0, 0, 0]])
    token_r = torch.tensor([[-0.1, -0.2, 9.0, 9.0, -0.3], [0.0, 0.0, 0.0, 0.0, 0.0]])
    ret = token_returns(torch.tensor([1.0, 2.0]), token_r, mask, gamma=0.5)
    assert torch.allclose(ret, torch.tensor([[-0.025, 0.15, 0.0, 0.0, 0.7], [1.0, 2.0, 0.0, 0.0, 0.0]]))
    # gamma 1, as the preset: every model token of the episode gets the final reward less the KL after it
    ret = token_returns(torch.tensor([1.0]), torch.zeros(1, 5), mask[:1])
    assert torch.equal(ret, torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]]))


def test_estimate_advantages_folds_token_rewards_into_each_group():
    # rewards [1, 0, 2, 0] in groups of 2; row 0's token rewards sum to -0.5: totals [0.5, 0, 2, 0];
    # unscaled: group means 0.25 and 1 -> [0.25, -0.25, 1, -1]; rloo: [0.5 - 0, 0 - 0.5, 2 - 0, 0 - 2]
    rewards, mask = torch.tensor([1.0, 0.0, 2.0, 0.0]), torch.ones(4, 2)
    token_r = torch.tensor([[-0.25, -0.25], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    adv, returns = estimate_advantages("group", rewards, token_r, mask, 2, scale="none")
    assert torch.allclose(adv, torch.tensor([0.25, -0.25, 1.0, -1.0])) and returns is None
    adv, _ = estimate_advantages("rloo", rewards, token_r, mask, 2)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 2.0, -2.0]))
    with pytest.raises(ValueError, match="unknown adv_estimator 'ppo2': one of group, rloo, group_passk, opo, gpg, reinforce_pp, reinforce_pp_baseline, gae"):
        estimate_advantages("ppo2", rewards, token_r, mask, 2)


def test_gae_estimator_puts_the_reward_on_the_last_trained_token():
    # one row, mask [1, 0, 1] (an environment token between), V = 0, gamma = lam = 1: the reward 3 lands on
    # token 2, and GAE carries it back over the masked token: raw advantages [3, 0, 3], returns the same;
    # whitened over the 2 trained tokens: equal values -> 0
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, returns = estimate_advantages("gae", torch.tensor([3.0]), torch.zeros(1, 3), mask, 1, values=torch.zeros(1, 3))
    assert torch.equal(returns, torch.tensor([[3.0, 0.0, 3.0]])) and torch.equal(adv, torch.zeros(1, 3))


def test_masks_and_widths():
    completion = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    env = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    present = present_tokens(completion, env)
    assert torch.equal(present, torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0] * 4]))
    assert present_tokens(completion) is completion
    assert torch.equal(last_token_mask(completion), torch.tensor([[False, True, False, False],
                                                                   [False, False, False, True],
                                                                   [False, False, False, False]]))
    assert row_widths(completion).tolist() == [2, 4, 0] and row_widths(present).tolist() == [2, 4, 0]
    assert row_widths(torch.zeros(2, 0)).tolist() == [0, 0]


def test_passk_advantages_only_the_best_learns():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.0]])
    # margin over the runner-up: 1 - 0.5 = 0.5, to the best completion only
    assert torch.allclose(passk_advantages(rewards, "none"), torch.tensor([[0.5, 0.0, 0.0, 0.0]]))
    # group: / unbiased std: mean 0.375, squares 0.390625 + 0.140625 + 0.015625 + 0.140625 = 0.6875, / 3 -> std 0.478714
    assert torch.allclose(passk_advantages(rewards, "group", 0.0), torch.tensor([[0.5 / 0.478714, 0, 0, 0]]),
                          rtol=1e-5)


def test_opo_baseline_is_length_weighted():
    # baseline (3 * 1 + 1 * 0) / 4 = 0.75
    assert torch.allclose(opo_advantages(torch.tensor([[1.0, 0.0]]), torch.tensor([[3, 1]])),
                          torch.tensor([[0.25, -0.75]]))


def test_gpg_advantages_scale_by_the_share_of_non_zero_rewards():
    # 4 completions, 1 with a non-zero reward: alpha 4; centred 0.5, -0.5 and 0, 0
    assert torch.allclose(gpg_advantages(torch.tensor([[1.0, 0.0], [0.0, 0.0]])), torch.tensor([[2.0, -2.0], [0, 0]]))
