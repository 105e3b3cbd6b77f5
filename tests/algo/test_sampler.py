"""Token weights and masks of rlvr.algo.sampler on tensors worked out by hand."""
import math

import pytest
import torch

from rlvr.algo import (adaptive_entropy_coef, entropy_bonus, entropy_bonus_coef, high_entropy_mask, off_policy_mask,
                       sampler_weights, tis_weights)

# trainer log-probs 0; the sampler's give ratios pi_trainer / pi_sampler of 4, 1, 0.25 (row 0: product 1)
# and 2, 2, 1 (row 1: product 4)
TRAINER = torch.zeros(2, 3)
SAMPLER = -torch.tensor([[4.0, 1.0, 0.25], [2.0, 2.0, 1.0]]).log()
MASK = torch.ones(2, 3)


def test_token_truncate_clamps_each_ratio():
    w, m = sampler_weights(TRAINER, SAMPLER, MASK, "token_truncate", 0.0, 2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.25], [2.0, 2.0, 1.0]]))
    assert math.isclose(float(m["sampler/truncated_token_frac"]), 1 / 6, rel_tol=1e-6)  # only the 4
    assert float(m["sampler/masked_token_frac"]) == 0.0
    assert torch.equal(tis_weights(TRAINER, SAMPLER, MASK, 2.0), w)  # rollout.tis_cap is this mode
    w, _ = sampler_weights(TRAINER, SAMPLER, MASK, "token_truncate", 0.5, 2.0)  # C_min lifts the 0.25
    assert torch.allclose(w[0], torch.tensor([2.0, 1.0, 0.5]))


def test_token_mask_zeroes_ratios_outside_the_band():
    w, m = sampler_weights(TRAINER, SAMPLER, MASK, "token_mask", 0.5, 2.0)
    # IcePop's band [0.5, 2]: 4 and 0.25 fall out; 2 is inside (the band is closed)
    assert torch.allclose(w, torch.tensor([[0.0, 1.0, 0.0], [2.0, 2.0, 1.0]]))
    assert math.isclose(float(m["sampler/masked_token_frac"]), 2 / 6, rel_tol=1e-6)
    assert float(m["sampler/masked_seq_frac"]) == 0.5  # row 0 has masked tokens, row 1 none


def test_sequence_modes_use_the_product_of_the_token_ratios():
    w, _ = sampler_weights(TRAINER, SAMPLER, MASK, "sequence_truncate", 0.0, 2.0)
    assert torch.allclose(w, torch.tensor([[1.0] * 3, [2.0] * 3]))  # products 1 and 4 -> 1 and 2
    w, m = sampler_weights(TRAINER, SAMPLER, MASK, "sequence_mask", 0.0, 3.0)
    assert torch.allclose(w, torch.tensor([[1.0] * 3, [0.0] * 3]))  # TRL's default C_max 3 drops the 4
    assert float(m["sampler/masked_seq_frac"]) == 0.5


def test_weights_are_zero_off_the_mask_and_at_non_finite_log_probs():
    sampler = SAMPLER.clone()
    sampler[1, 2] = -math.inf
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    w, _ = sampler_weights(TRAINER, sampler, mask, "token_truncate", 0.0, 2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.0], [2.0, 2.0, 0.0]]))


def test_bad_modes_and_bands_are_errors():
    with pytest.raises(ValueError, match="sampler correction must be one of"):
        sampler_weights(TRAINER, SAMPLER, MASK, "token", 0.0, 2.0)
    with pytest.raises(ValueError, match="0 <= c_min < c_max"):
        sampler_weights(TRAINER, SAMPLER, MASK, "token_mask", 2.0, 1.0)


def test_off_policy_mask_drops_negative_and_far_sequences_only():
    logp = torch.zeros(3, 2)
    behaviour = torch.tensor([[0.1, 0.3], [0.0, 0.1], [0.5, 0.5]])  # mean KL 0.2, 0.05, 0.5
    keep = off_policy_mask(logp, behaviour, torch.tensor([-1.0, -1.0, 1.0]), torch.ones(3, 2), 0.1)
    # row 0: A < 0 and 0.2 > 0.1 -> dropped; row 1: 0.05 <= 0.1 kept; row 2: A >= 0 kept however far
    assert torch.equal(keep, torch.tensor([[0.0], [1.0], [1.0]]))


def test_high_entropy_mask_keeps_the_top_quantile():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    # real entropies 0.1 0.3 0.5 0.9: the 0.5 quantile is 0.4 (linear between 0.3 and 0.5); the padded 7 never counts
    assert high_entropy_mask(entropy, mask, 0.5).tolist() == [[False, True, True, False, False]]
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == [[True, True, True, True, False]]


def test_adaptive_entropy_coefficient_steps_and_bounds():
    assert math.isclose(adaptive_entropy_coef(0.01, 0.1, 0.2, 0.005), 0.015)  # below target: up
    assert math.isclose(adaptive_entropy_coef(0.01, 0.3, 0.2, 0.005), 0.005)  # above: down
    assert adaptive_entropy_coef(0.01, 0.1, 0.2, 0.005, 0.0, 0.012) == 0.012  # capped
    assert adaptive_entropy_coef(0.002, 0.3, 0.2, 0.005) == 0.0  # floored at 0
    assert entropy_bonus_coef(0.01, 0.1, 0.2) == 0.01 and entropy_bonus_coef(0.01, math.inf, 0.2) == 0.0


def test_entropy_bonus_is_a_mean_over_the_selected_tokens():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])  # the 9s are padding
    chosen = high_entropy_mask(entropy, mask, 0.6)  # real 1..6: the 0.4 quantile is 3, so 3, 4, 5, 6
    assert chosen.tolist() == [[False, False, True, True], [True, True, False, False]]
    # no selection: the policy's aggregation over every real token: 21 / 6 = 3.5 (token mean);
    # per sequence (1 + 2 + 3 + 4) / 4 = 2.5 and (5 + 6) / 2 = 5.5 -> 4
    assert float(entropy_bonus(entropy, mask, None, "token-mean")) == 3.5
    assert float(entropy_bonus(entropy, mask, None, "seq-mean-token-mean")) == 4.0
    # selected: (3 + 4 + 5 + 6) / 4 = 4.5 (TRL's effective mask), not / 6 = 3; per sequence (3 + 4) / 2 = 3.5
    # and (5 + 6) / 2 = 5.5 -> 4.5
    assert float(entropy_bonus(entropy, mask, chosen, "token-mean")) == 4.5
    assert float(entropy_bonus(entropy, mask, chosen, "seq-mean-token-mean")) == 4.5
    # a part of a batch of 12 real tokens that selected 4 of its 6: 18 / (12 * 4 / 6) = 2.25, so two such
    # parts sum to the mean over their 8 selected tokens
    assert float(entropy_bonus(entropy, mask, chosen, "token-mean", units=12.0)) == 2.25
    # no real token: 0, not nan
    assert float(entropy_bonus(entropy, torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bool), "token-mean")) == 0.0
