import torch

from rlvr.algo import group_advantages


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
