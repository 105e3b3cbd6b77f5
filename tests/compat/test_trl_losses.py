"""rlvr's policy objectives and token weights against TRL 1.16.0's GRPOTrainer._compute_loss (its
loss_type, importance_sampling_level, importance-sampling ratio, off_policy_mask_threshold and
top_entropy_quantile): the loss and its gradient with respect to the log-probs, on random inputs of
several shapes. What verl also has is checked against verl (test_verl_losses.py); these are the parts
only TRL has (LUSPO, VESPO, the off-policy mask, the entropy selection) and the loss types rlvr's presets
mirror."""
import pytest
import torch

from rlvr.algo import (adaptive_entropy_coef, entropy_bonus, entropy_bonus_coef, high_entropy_mask, off_policy_mask,
                       policy_loss, sampler_weights)
from tests.compat.peers import trl_loss, trl_state, trl_trainer

SHAPES = [(3, 5), (8, 17), (16, 64)]
TOL = dict(rtol=1e-5, atol=1e-6)


def inputs(shape, seed, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    b, t = shape
    logp = (-3 * torch.rand(b, t, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    sampler = old + 0.5 * torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    entropy = 3 * torch.rand(b, t, generator=g, dtype=torch.float64)
    return logp, old, sampler, mask, adv, entropy


def compare(shape, seed, mine, loss_type, spread=0.3, **trl_args):
    """mine(logp, old, sampler, mask, adv, entropy) -> (rlvr's loss, extra TRL inputs); both losses and
    gradients must agree."""
    logp, old, sampler, mask, adv, entropy = inputs(shape, seed, spread)
    ours, extra = mine(logp, old, sampler, mask, adv, entropy)
    g_ours, = torch.autograd.grad(ours, logp)
    lp = logp.detach().clone().requires_grad_()
    theirs = trl_loss(trl_state(loss_type, **trl_args), lp, entropy,
                      {"completion_mask": mask, "advantages": adv, "old_per_token_logps": old, **extra})
    g_theirs, = torch.autograd.grad(theirs, lp)
    torch.testing.assert_close(ours.detach(), theirs.detach(), **TOL)
    torch.testing.assert_close(g_ours, g_theirs, **TOL)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("spread", [1e-4, 0.05])
def test_luspo_matches_trl(shape, spread):
    compare(shape, 1, lambda lp, old, s, m, a, e: (
        policy_loss(lp, old, a, m, 3e-4, 4e-4, None, "sequence", "seq-mean-token-sum")[0], {}),
        "luspo", spread, epsilon=3e-4, epsilon_high=4e-4, importance_sampling_level="sequence")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_cispo_matches_trl(shape, level):
    # TRL's cispo clamps the ratio at epsilon_high (5.0, ScaleRL's) with no lower bound: clip_low 1, clip_high 4
    compare(shape, 2, lambda lp, old, s, m, a, e: (
        policy_loss(lp, old, a, m, 1.0, 4.0, None, level, "token-mean", objective="cispo")[0], {}),
        "cispo", 0.8 if level == "token" else 0.3, epsilon_high=5.0, importance_sampling_level=level)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_sapo_matches_trl(shape, level):
    compare(shape, 3, lambda lp, old, s, m, a, e: (
        policy_loss(lp, old, a, m, ratio_level=level, aggregation="seq-mean-token-mean", objective="sapo")[0], {}),
        "sapo", 0.6, importance_sampling_level=level)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_sampler", [False, True])
def test_vespo_matches_trl(shape, with_sampler):
    def mine(lp, old, s, m, a, e):
        w = sampler_weights(old, s, m, "token_truncate", 0.0, 3.0)[0].double() if with_sampler else None
        extra = {"importance_sampling_ratio": torch.where(m > 0, w, torch.ones_like(w))} if with_sampler else {}
        return policy_loss(lp, old, a, m, objective="vespo", sampler_w=w)[0], extra

    compare(shape, 4, mine, "vespo", 0.05, use_vllm=with_sampler)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("loss_type,agg", [("grpo", "seq-mean-token-mean"), ("dapo", "token-mean"),
                                           ("bnpo", "token-mean")])
def test_clipped_surrogate_matches_trl_loss_types(shape, loss_type, agg):
    compare(shape, 5, lambda lp, old, s, m, a, e: (policy_loss(lp, old, a, m, 0.2, 0.28, None, "token", agg)[0], {}),
            loss_type, 0.5, epsilon=0.2, epsilon_high=0.28)


@pytest.mark.parametrize("shape", SHAPES)
def test_dr_grpo_matches_trl(shape):
    t = shape[1]
    compare(shape, 6, lambda lp, old, s, m, a, e: (
        policy_loss(lp, old, a, m, 0.2, 0.2, None, "token", "seq-mean-token-sum-norm", norm_length=t + 3)[0], {}),
        "dr_grpo", 0.5, max_completion_length=t + 3)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_sampler_correction_and_off_policy_mask_match_trl(shape, mode):
    """TRL multiplies the loss by its importance-sampling ratio and the off-policy sequence mask, which reads
    the sampler's log-probs."""
    def mine(lp, old, s, m, a, e):
        w, _ = sampler_weights(old, s, m, mode, 0.0, 3.0)
        keep = off_policy_mask(lp, s, a, m, 0.1).expand_as(m)
        ratio = w[:, :1] if mode.startswith("sequence") else torch.where(m > 0, w, torch.ones_like(w))
        loss = policy_loss(lp, old, a, m, 0.2, 0.2, None, "token", "seq-mean-token-mean", sampler_w=w.double(),
                           keep=keep)[0]
        return loss, {"importance_sampling_ratio": ratio.double(), "sampling_per_token_logps": s}

    compare(shape, 7, mine, "grpo", 0.3, use_vllm=True, off_policy_mask_threshold=0.1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("quantile", [0.2, 0.5])
def test_top_entropy_quantile_matches_trl(shape, quantile):
    compare(shape, 8, lambda lp, old, s, m, a, e: (
        policy_loss(lp, old, a, m, 0.2, 0.2, None, "token", "token-mean",
                    keep=high_entropy_mask(e, m, quantile).double())[0], {}),
        "dapo", 0.3, top_entropy_quantile=quantile)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("quantile", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("off_policy", [False, True])
def test_entropy_bonus_with_the_entropy_selection_matches_trl(shape, quantile, off_policy):
    """TRL's bonus is the token mean of the entropy over its effective mask (the real tokens of the entropy
    selection, whatever the off-policy mask drops), with the selection's policy loss beside it."""
    def mine(lp, old, s, m, a, e):
        chosen = high_entropy_mask(e, m, quantile).double() if quantile < 1 else None
        keep = chosen
        if off_policy:
            drop = off_policy_mask(lp, s, a, m, 0.1).expand_as(m)
            keep = drop if keep is None else keep * drop
        loss = policy_loss(lp, old, a, m, 0.2, 0.2, None, "token", "token-mean", keep=keep)[0]
        extra = {"sampling_per_token_logps": s} if off_policy else {}
        return loss - 0.05 * entropy_bonus(e, m, chosen, "token-mean"), extra

    compare(shape, 11, mine, "dapo", 0.3, top_entropy_quantile=quantile, entropy_coef=0.05,
            off_policy_mask_threshold=0.1 if off_policy else None)


@pytest.mark.parametrize("shape", SHAPES)
def test_off_policy_mask_matches_trl(shape):
    logp, old, sampler, mask, adv, _ = inputs(shape, 9)
    for threshold in (0.0, 0.1, 0.5):
        theirs = trl_trainer().get_off_policy_mask(adv[:, None], logp, sampler, mask, threshold)
        ours = off_policy_mask(logp, sampler, adv, mask, threshold)
        torch.testing.assert_close(ours, theirs)
        assert 0 < float(ours.sum()) < len(ours) or threshold == 0.5  # some kept, some dropped


@pytest.mark.parametrize("target", [0.5, 1.5, 5.0])
def test_adaptive_entropy_controller_matches_trl(target):
    """TRL's use_adaptive_entropy: the coefficient applied in a step and its update after the step, from the
    mean entropy of the trained tokens, against rlvr's adaptive_entropy_coef and entropy_bonus_coef."""
    logp, old, _, mask, adv, entropy = inputs((8, 17), 10)
    world = float((entropy * mask).sum() / mask.sum())  # the step's mean entropy, about 1.5 nats
    coef, last = 0.01, 1.0
    state = trl_state("dapo", entropy_coef=coef, entropy_target=target, entropy_coef_delta=0.005)
    state.use_adaptive_entropy, state._entropy_bonus_enabled = True, True
    state._last_world_entropy, state._entropy_window_stats = last, None
    with_bonus = trl_loss(state, logp.detach(), entropy, {"completion_mask": mask, "advantages": adv,
                                                          "old_per_token_logps": old})
    state2 = trl_state("dapo")
    plain = trl_loss(state2, logp.detach(), entropy, {"completion_mask": mask, "advantages": adv,
                                                      "old_per_token_logps": old})
    applied = entropy_bonus_coef(coef, last, target)
    # TRL's bonus is -coef * the token mean of the entropy
    assert float(plain - with_bonus) == pytest.approx(applied * world, rel=1e-6)
    assert state.entropy_coef == pytest.approx(adaptive_entropy_coef(coef, world, target, 0.005, 0.0, 1.0))
    assert state._last_world_entropy == pytest.approx(world)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_a_row_with_no_trained_token_is_left_out_of_the_sequence_mean(agg):
    """Where rlvr differs, on purpose: a row with no trained token (every completion truncated under
    algo.mask_truncated, or all its tokens dropped) does not count in a sequence mean. verl's agg_loss
    does the same by default (global_batch_size None); TRL's grpo / luspo losses (.mean() over rows) and
    verl's trainer (global_batch_size = the mini-batch's rows) count it, so their loss is rlvr's times
    (rows with a token) / rows. verl's default: test_verl_losses.py."""
    logp, old, _, mask, adv, _ = inputs((8, 17), 12, 0.3)
    mask[[2, 5]] = 0.0  # two of the 8 rows hold no trained token
    ours, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2, None, "token", agg)
    loss_type = "grpo" if agg == "seq-mean-token-mean" else "luspo"
    theirs = trl_loss(trl_state(loss_type), logp.detach().clone(), torch.zeros_like(mask),
                      {"completion_mask": mask, "advantages": adv, "old_per_token_logps": old})
    torch.testing.assert_close(ours.detach() * 6 / 8, theirs.detach(), **TOL)
