"""rlvr's policy objectives against verl 0.9.1's (verl/trainer/ppo/core_algos.py): the loss and its gradient
with respect to the log-probs, on random inputs of several shapes. The peers are loaded by tests/compat/peers.py."""
import pytest
import torch

from rlvr.algo import aggregate, policy_loss
from tests.compat.peers import verl, verl_actor

SHAPES = [(3, 5), (8, 17), (16, 64)]
TOL = dict(rtol=1e-5, atol=1e-6)


def inputs(shape, seed, spread=0.3, adv_scale=1.0):
    """log-probs [B, T] with grad, old log-probs near them, a mask whose rows each hold a real token, and
    advantages [B]."""
    g = torch.Generator().manual_seed(seed)
    b, t = shape
    logp = (-3 * torch.rand(b, t, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    adv = adv_scale * torch.randn(b, generator=g, dtype=torch.float64)
    return logp, old, mask, adv


def both(rlvr_fn, verl_fn, shape, seed, **kw):
    """(rlvr's loss, its gradient), (verl's loss, its gradient) on the same inputs."""
    logp, old, mask, adv = inputs(shape, seed, **kw)
    mine = rlvr_fn(logp, old, adv, mask)
    g_mine, = torch.autograd.grad(mine, logp)
    lp = logp.detach().clone().requires_grad_()
    theirs = verl_fn(old, lp, adv[:, None] * mask, mask)  # verl's advantages are [B, T], 0 off the mask
    g_theirs, = torch.autograd.grad(theirs, lp)
    return (mine, g_mine), (theirs, g_theirs)


def check(pair):
    (mine, g_mine), (theirs, g_theirs) = pair
    torch.testing.assert_close(mine.detach(), theirs.detach(), **TOL)
    torch.testing.assert_close(g_mine, g_theirs, **TOL)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_clipped_surrogate_matches_verl_vanilla(shape, agg):
    cfg = verl_actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, 0.2, 0.28, 3.0, "token", agg)[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_vanilla(old, lp, a, m, agg, cfg)[0],
               shape, seed=1, spread=0.5))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_sequence_ratio_matches_verl_gspo(shape, agg):
    cfg = verl_actor(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    for spread in (1e-4, 0.05):  # inside and outside GSPO's narrow clip range
        check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, 3e-4, 4e-4, None, "sequence", agg)[0],
                   lambda old, lp, a, m: verl().core.compute_policy_loss_gspo(old, lp, a, m, agg, cfg)[0],
                   shape, seed=2, spread=spread))


@pytest.mark.parametrize("shape", SHAPES)
def test_sapo_matches_verl(shape):
    cfg = verl_actor(clip_ratio=0.2, tau_pos=1.0, tau_neg=1.05)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, aggregation="seq-mean-token-mean", objective="sapo",
                                                 params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_sapo(old, lp, a, m, "seq-mean-token-mean", cfg)[0],
               shape, seed=3, spread=0.6))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("clip", [(0.2, 0.28), (1.0, 4.0)])
def test_cispo_matches_verl(shape, clip):
    cfg = verl_actor(clip_ratio_low=clip[0], clip_ratio_high=clip[1])
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, *clip, objective="cispo")[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_cispo(old, lp, a, m, "token-mean", cfg)[0],
               shape, seed=4, spread=0.5))


@pytest.mark.parametrize("shape", SHAPES)
def test_gmpo_matches_verl_geo_mean(shape):
    cfg = verl_actor(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, 0.4, 0.4, aggregation="seq-mean-token-mean",
                                                 objective="gmpo")[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_geo_mean(old, lp, a, m, "token-mean", cfg)[0],
               shape, seed=5, spread=0.5))


@pytest.mark.parametrize("shape", SHAPES)
def test_gmpo_with_sampler_weights_matches_verl(shape):
    cfg = verl_actor(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)
    w = 0.5 + torch.rand(shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, 0.4, 0.4, aggregation="seq-mean-token-mean",
                                                 objective="gmpo", sampler_w=w * m)[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_geo_mean(old, lp, a, m, "token-mean", cfg,
                                                                              w * m)[0],
               shape, seed=5, spread=0.5))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gpg_matches_verl(shape, agg):
    cfg = verl_actor(clip_ratio=0.2)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, aggregation=agg, objective="gpg")[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_gpg(old, lp, a, m, agg, cfg)[0],
               shape, seed=6))


@pytest.mark.parametrize("shape", SHAPES)
def test_clip_cov_matches_verl(shape):
    # a wide band and ratio so that tokens are dropped at these sizes; both draw the same torch.randperm
    knobs = dict(cov_ratio=0.2, clip_cov_lb=0.0, clip_cov_ub=5.0)
    cfg = verl_actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_cov_ratio=0.2, clip_cov_lb=0.0,
                     clip_cov_ub=5.0)

    def mine(lp, old, a, m):
        torch.manual_seed(11)
        loss, stats = policy_loss(lp, old, a, m, 0.2, 0.28, objective="clip_cov", params=knobs)
        assert float(stats["objective/clipped_frac"]) > 0  # the comparison covers dropped tokens
        return loss

    def theirs(old, lp, a, m):
        torch.manual_seed(11)
        return verl().core.compute_policy_loss_clip_cov(old, lp, a, m, "token-mean", cfg)[0]

    check(both(mine, theirs, shape, seed=7, spread=0.3, adv_scale=3.0))


@pytest.mark.parametrize("shape", SHAPES)
def test_kl_cov_matches_verl(shape):
    cfg = verl_actor(clip_ratio=0.2, kl_cov_ratio=0.1, ppo_kl_coef=1.0)

    def mine(lp, old, a, m):
        loss, stats = policy_loss(lp, old, a, m, objective="kl_cov", params={"cov_ratio": 0.1, "kl_cov_coef": 1.0})
        assert float(stats["objective/clipped_frac"]) > 0
        return loss

    check(both(mine, lambda old, lp, a, m: verl().core.compute_policy_loss_kl_cov(old, lp, a, m, "token-mean", cfg)[0],
               shape, seed=8, spread=0.3))


@pytest.mark.parametrize("shape", SHAPES)
def test_sampler_weights_multiply_the_loss_as_verl(shape):
    """verl multiplies each per-token loss by rollout_is_weights; rlvr's sampler_w does the same."""
    cfg = verl_actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
    w = 2 * torch.rand(shape, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    check(both(lambda lp, old, a, m: policy_loss(lp, old, a, m, 0.2, 0.2, 3.0, sampler_w=w)[0],
               lambda old, lp, a, m: verl().core.compute_policy_loss_vanilla(old, lp, a, m, "token-mean", cfg, w)[0],
               shape, seed=12, spread=0.5))


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_rows_with_no_trained_token_leave_the_sequence_mean_as_verl_agg_loss_default(agg):
    """A row with no trained token is not counted in a sequence mean, as verl's agg_loss without a
    global_batch_size (TRL's and verl's trainer count it: test_trl_losses.py)."""
    logp, old, mask, adv = inputs((8, 17), 13, spread=0.5)
    mask[[1, 6]] = 0.0
    cfg = verl_actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    ours = policy_loss(logp, old, adv, mask, 0.2, 0.28, 3.0, "token", agg, norm_length=17)[0]
    theirs = verl().core.compute_policy_loss_vanilla(old, logp, adv[:, None] * mask, mask, agg, cfg)[0]
    torch.testing.assert_close(ours.detach(), theirs.detach(), **TOL)
    # verl's trainer passes global_batch_size = the rows (8): the same sums over 8 rows, not 6
    x = torch.rand(8, 17, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    counted = verl().core.agg_loss(x, mask, agg, global_batch_size=8, loss_scale_factor=17)
    assert float(counted) == pytest.approx(float(aggregate(x, mask, agg, norm_length=17)) * 6 / 8, rel=1e-9)
