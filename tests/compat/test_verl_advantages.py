"""rlvr's advantage estimators (rlvr.train.batch.compute_advantages, the path a run takes) and sampler
correction (rlvr.algo.sampler_weights) against verl 0.9.1's: core_algos' estimators and
rollout_corr_helper.compute_rollout_correction_weights, on random inputs of several shapes."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlvr.algo import sampler_weights, tis_weights
from rlvr.config import AlgoConfig
from rlvr.train.batch import compute_advantages
from rlvr.train.settings import advantage_settings, kl_settings
from tests.compat.peers import verl

GROUPS = [(2, 2), (4, 8), (16, 5)]  # (prompts, group size)
TOL = dict(rtol=1e-5, atol=1e-5)


def batch(p, g, seed, binary=False):
    """rewards [B], the token rewards verl reads (the reward at each completion's last token), mask [B, T]
    with a real token in every row, verl's group index."""
    gen = torch.Generator().manual_seed(seed)
    b, t = p * g, 7
    rewards = (torch.rand(b, generator=gen) < 0.4).float() if binary else torch.randn(b, generator=gen)
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    token_rewards = torch.zeros(b, t)
    token_rewards[torch.arange(b), lengths - 1] = rewards
    return rewards, token_rewards, mask, np.repeat(np.arange(p), g)


def mine(estimator, rewards, mask, g, **kw):
    a = AlgoConfig(adv_estimator=estimator, **kw)
    adv, _, _ = compute_advantages(advantage_settings(a), kl_settings(a), rewards.clone(), g, mask)
    return adv[:, None] * mask if adv.dim() == 1 else adv  # verl's shape: [B, T], 0 off the mask


@pytest.mark.parametrize("p,g", GROUPS)
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("scale", ["group", "none"])
def test_group_advantages_match_verl_grpo(p, g, binary, scale):
    rewards, token_rewards, mask, index = batch(p, g, seed=p * g, binary=binary)
    theirs, _ = verl().core.compute_grpo_outcome_advantage(token_rewards, mask, index, 1e-6, scale == "group")
    torch.testing.assert_close(mine("group", rewards, mask, g, adv_scale=scale), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
def test_rloo_matches_verl(p, g):
    rewards, token_rewards, mask, index = batch(p, g, seed=1)
    theirs, _ = verl().core.compute_rloo_outcome_advantage(token_rewards, mask, index)
    torch.testing.assert_close(mine("rloo", rewards, mask, g), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
def test_reinforce_pp_matches_verl(p, g):
    rewards, token_rewards, mask, _ = batch(p, g, seed=2)
    config = SimpleNamespace(gamma=1.0)
    theirs, _ = verl().core.compute_reinforce_plus_plus_outcome_advantage(token_rewards, mask, config)
    torch.testing.assert_close(mine("reinforce_pp", rewards, mask, g, beta=0.0), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_matches_verl_across_environment_spans(p, g, gamma):
    """Multi-turn masks: holes (environment tokens) inside each row, the reward at its last model token."""
    gen = torch.Generator().manual_seed(p * g)
    b, t = p * g, 9
    rewards = torch.randn(b, generator=gen)
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = ((torch.rand(b, t, generator=gen) < 0.6) & (torch.arange(t)[None, :] < lengths[:, None])).float()
    mask[torch.arange(b), lengths - 1] = 1.0  # each row ends on a model token, the reward's
    token_rewards = torch.zeros(b, t)
    token_rewards[torch.arange(b), lengths - 1] = rewards
    assert bool(((mask[:, :-1] == 0) & (mask.cumsum(-1)[:, :-1] < mask.sum(-1, keepdim=True))).any())  # holes
    theirs, _ = verl().core.compute_reinforce_plus_plus_outcome_advantage(token_rewards, mask,
                                                                           SimpleNamespace(gamma=gamma))
    torch.testing.assert_close(mine("reinforce_pp", rewards, mask, g, beta=0.0, gamma=gamma), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
def test_reinforce_pp_baseline_matches_verl(p, g):
    rewards, token_rewards, mask, index = batch(p, g, seed=3)
    theirs, _ = verl().core.compute_reinforce_plus_plus_baseline_outcome_advantage(token_rewards, mask, index)
    torch.testing.assert_close(mine("reinforce_pp_baseline", rewards, mask, g), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
@pytest.mark.parametrize("scale", ["group", "none"])
def test_group_passk_matches_verl_grpo_passk(p, g, scale):
    rewards, token_rewards, mask, index = batch(p, g, seed=4)
    theirs, _ = verl().core.compute_grpo_passk_outcome_advantage(
        token_rewards, mask, index, 1e-6, config={"norm_adv_by_std_in_grpo": scale == "group"})
    torch.testing.assert_close(mine("group_passk", rewards, mask, g, adv_scale=scale), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
def test_opo_matches_verl(p, g):
    rewards, token_rewards, mask, index = batch(p, g, seed=5)
    theirs, _ = verl().core.compute_opo_outcome_advantage(token_rewards, mask, index)
    torch.testing.assert_close(mine("opo", rewards, mask, g), theirs, **TOL)


@pytest.mark.parametrize("p,g", GROUPS)
@pytest.mark.parametrize("binary", [False, True])
def test_gpg_advantages_match_verl(p, g, binary):
    rewards, token_rewards, mask, index = batch(p, g, seed=6, binary=binary)
    theirs, _ = verl().core.compute_gpg_outcome_advantage(token_rewards, mask, index)
    torch.testing.assert_close(mine("gpg", rewards, mask, g), theirs, **TOL)


SHAPES = [(3, 5), (8, 17), (16, 64)]


def log_probs(shape, seed, gap):
    gen = torch.Generator().manual_seed(seed)
    b, t = shape
    trainer = -3 * torch.rand(b, t, generator=gen, dtype=torch.float64)
    sampler = trainer + gap * torch.randn(b, t, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    return trainer, sampler, (torch.arange(t)[None, :] < lengths[:, None]).double()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("level,gap", [("token", 0.8), ("sequence", 0.7)])
def test_truncated_sampler_weights_match_verl_tis(shape, level, gap):
    trainer, sampler, mask = log_probs(shape, seed=8, gap=gap)
    theirs, _ = verl().corr.compute_rollout_correction_weights(trainer - sampler, mask, level, 2.0)
    ours, stats = sampler_weights(trainer, sampler, mask, f"{level}_truncate", 0.0, 2.0)
    torch.testing.assert_close(ours.double(), theirs, **TOL)
    assert float(stats["sampler/truncated_token_frac"]) > 0  # the cap acted somewhere
    if level == "token":  # the existing rollout.tis_cap is this mode
        torch.testing.assert_close(tis_weights(trainer, sampler, mask, 2.0).double(), theirs, **TOL)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("level,gap", [("token", 0.8), ("sequence", 0.7)])
def test_masked_sampler_weights_match_verl_icepop(shape, level, gap):
    trainer, sampler, mask = log_probs(shape, seed=8, gap=gap)
    theirs, _ = verl().corr.compute_rollout_correction_weights(trainer - sampler, mask, level, "0.5_2.0")
    ours, stats = sampler_weights(trainer, sampler, mask, f"{level}_mask", 0.5, 2.0)
    torch.testing.assert_close(ours.double(), theirs, **TOL)
    masked = ((theirs == 0) & (mask > 0)).sum() / mask.sum()
    assert float(masked) > 0 and float(stats["sampler/masked_token_frac"]) == pytest.approx(float(masked))
