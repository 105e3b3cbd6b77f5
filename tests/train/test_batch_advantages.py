"""compute_advantages for every algo.adv_estimator, with the KL in the reward, on 2 prompts x 2
completions, T = 3; every expected value worked by hand in the comments."""
import pytest
import torch

from rlvr.config import AlgoConfig
from rlvr.train.batch import compute_advantages
from rlvr.train.settings import advantage_settings, kl_settings

G = 2
REWARDS = torch.tensor([1.0, 0.0, 2.0, 0.0])  # [B]: groups [1, 0] and [2, 0]
MASK = torch.tensor([[1.0, 1.0, 1.0],  # [B, T]: lengths 3, 2, 3, 1
                     [1.0, 1.0, 0.0],
                     [1.0, 1.0, 1.0],
                     [1.0, 0.0, 0.0]])
# logp - ref_logp per token; the masked 9.0 and 5.0 must not count
REF_LOGP = torch.zeros(4, 3)
LOGP = torch.tensor([[0.2, 0.1, 0.0],
                     [0.4, 0.2, 9.0],
                     [0.0, 0.0, 0.0],
                     [1.0, 5.0, 5.0]])


def advantages(values=None, logp=None, ref_logp=None, **knobs):
    a = AlgoConfig(**knobs)
    return compute_advantages(advantage_settings(a), kl_settings(a), REWARDS, G, MASK, logp, ref_logp, values)


def close(got, want):
    assert torch.allclose(got, torch.tensor(want), atol=1e-6, rtol=0), got


def test_group_scaled_by_the_group_std():
    # group 0: mean 0.5, centred [0.5, -0.5], std sqrt(0.25 + 0.25) = sqrt(0.5) (unbiased, G - 1 = 1)
    # group 1: mean 1, centred [1, -1], std sqrt(2): every advantage is +-1/sqrt(2) (up to adv_eps)
    adv, returns, metrics = advantages(adv_scale="group", adv_eps=0.0)
    h = 0.5 ** 0.5
    close(adv, [h, -h, h, -h])
    assert returns is None and metrics == {}
    adv, _, _ = advantages(adv_scale="group", adv_eps=1e-6)
    close(adv, [0.5 / (0.5 ** 0.5 + 1e-6), -0.5 / (0.5 ** 0.5 + 1e-6), 1 / (2 ** 0.5 + 1e-6), -1 / (2 ** 0.5 + 1e-6)])


def test_group_scaled_by_the_batch_std():
    # rewards [1, 0, 2, 0]: mean 0.75, squared deviations 0.0625 + 0.5625 + 1.5625 + 0.5625 = 2.75,
    # std sqrt(2.75 / 3) = 0.957427; centred [0.5, -0.5, 1, -1] over it
    adv, _, _ = advantages(adv_scale="batch", adv_eps=0.0)
    s = (2.75 / 3) ** 0.5
    close(adv, [0.5 / s, -0.5 / s, 1 / s, -1 / s])
    close(adv, [0.522233, -0.522233, 1.044466, -1.044466])


def test_group_unscaled_is_dr_grpo():
    adv, _, _ = advantages(adv_scale="none")
    close(adv, [0.5, -0.5, 1.0, -1.0])


def test_rloo_subtracts_the_mean_of_the_others():
    # G = 2: the other is the one other completion: [1 - 0, 0 - 1, 2 - 0, 0 - 2]
    adv, returns, _ = advantages(adv_estimator="rloo")
    close(adv, [1.0, -1.0, 2.0, -2.0])
    assert returns is None


def test_reinforce_pp_whitens_the_returns_over_the_batch():
    # gamma 1, no KL: each unmasked token's return is its sequence reward:
    # [1 1 1], [0 0 -], [2 2 2], [0 - -]; 9 tokens, mean 9 / 9 = 1, squared deviations 1 + 1 + 3 + 1 = 6,
    # std sqrt(6 / 8); masked tokens get 0
    adv, returns, metrics = advantages(adv_estimator="reinforce_pp")
    z = 1 / (6 / 8) ** 0.5  # 1.154701
    close(adv, [[0, 0, 0], [-z, -z, 0], [z, z, z], [-z, 0, 0]])
    assert returns is None and metrics == {}


def test_reinforce_pp_baseline_centres_on_the_group_then_whitens_the_tokens():
    # group means 0.5 and 1: centred rewards 0.5, -0.5, 1, -1 at each real token:
    # [.5 .5 .5], [-.5 -.5 -], [1 1 1], [-1 - -]; 9 tokens, sum 1.5 + -1 + 3 + -1 = 2.5, mean 0.277778;
    # squared deviations 3 * 0.049383 + 2 * 0.604938 + 3 * 0.521605 + 1.632716 = 4.555556, / 8 -> std 0.754615
    adv, returns, _ = advantages(adv_estimator="reinforce_pp_baseline")
    mean, std = 2.5 / 9, (4.555556 / 8) ** 0.5
    z = lambda x: (x - mean) / std
    close(adv, [[z(0.5)] * 3, [z(-0.5), z(-0.5), 0], [z(1.0)] * 3, [z(-1.0), 0, 0]])
    assert returns is None


def test_outcome_estimators_from_verl():
    # group_passk: the best of each group by its margin: 1 - 0 and 2 - 0 (scale none)
    close(advantages(adv_estimator="group_passk", adv_scale="none")[0], [1.0, 0.0, 2.0, 0.0])
    # opo: baselines (3 * 1 + 2 * 0) / 5 = 0.6 and (3 * 2 + 1 * 0) / 4 = 1.5 (lengths 3, 2 and 3, 1)
    close(advantages(adv_estimator="opo")[0], [0.4, -0.6, 0.5, -1.5])
    # gpg: 4 completions, 2 non-zero: alpha 2; centred 0.5, -0.5, 1, -1
    close(advantages(adv_estimator="gpg")[0], [1.0, -1.0, 2.0, -2.0])


def test_reinforce_pp_discounts():
    # gamma 0.5: the reward arrives at the last token and halves per step back:
    # [0.25 0.5 1], [0 0 -], [0.5 1 2], [0 - -]; sum 5.25, sum of squares 0.0625 + 0.25 + 1 + 0.25 + 1 + 4
    # = 6.5625; mean 5.25 / 9, variance (6.5625 - 5.25^2 / 9) / 8
    adv, _, _ = advantages(adv_estimator="reinforce_pp", gamma=0.5)
    ret = torch.tensor([[0.25, 0.5, 1.0], [0.0, 0.0, 0.0], [0.5, 1.0, 2.0], [0.0, 0.0, 0.0]])
    mean, std = 5.25 / 9, ((6.5625 - 5.25 ** 2 / 9) / 8) ** 0.5
    close(adv, ((ret - mean) / std * MASK).tolist())


def test_gae_whitened_advantages_and_returns():
    # gamma 1, lam 0.5, V = 0.5 on every token; the sequence reward is the last token's reward.
    # row 0: delta = [0, 0, 1 - 0.5]; a2 = 0.5, a1 = 0 + 0.5 * 0.5 = 0.25, a0 = 0.125
    # row 1: a1 = 0 - 0.5 = -0.5, a0 = (0 + 0.5 - 0.5) + 0.5 * -0.5 = -0.25
    # row 2: a2 = 2 - 0.5 = 1.5, a1 = 0.75, a0 = 0.375;  row 3: a0 = 0 - 0.5 = -0.5
    # returns = a + V; the 9 advantages sum to 2.25 (mean 0.25), squared deviations sum to 3.28125
    values = 0.5 * MASK
    adv, returns, _ = advantages(values=values, adv_estimator="gae", gamma=1.0, lam=0.5)
    close(returns, [[0.625, 0.75, 1.0], [0.25, 0.0, 0.0], [0.875, 1.25, 2.0], [0.0, 0.0, 0.0]])
    raw = torch.tensor([[0.125, 0.25, 0.5], [-0.25, -0.5, 0.0], [0.375, 0.75, 1.5], [-0.5, 0.0, 0.0]])
    close(adv, ((raw - 0.25) / (3.28125 / 8) ** 0.5 * MASK).tolist())
    with pytest.raises(ValueError, match="gae needs critic values"):
        advantages(adv_estimator="gae")


def test_kl_in_reward_is_folded_into_the_sequence_reward():
    # k1 per token = logp - ref on unmasked tokens: [0.2 0.1 0], [0.4 0.2 -], [0 0 0], [1.0 - -];
    # sums [0.3, 0.6, 0, 1.0]; kl_reward = 1.9 / 9 tokens
    # beta 0.5: totals [1 - 0.15, 0 - 0.3, 2 - 0, 0 - 0.5] = [0.85, -0.3, 2, -0.5]
    # no scaling: group means 0.275 and 0.75 -> [0.575, -0.575, 1.25, -1.25]
    knobs = dict(adv_scale="none", kl_in="reward", beta=0.5, kl_estimator="k1")
    adv, _, metrics = advantages(logp=LOGP, ref_logp=REF_LOGP, **knobs)
    close(adv, [0.575, -0.575, 1.25, -1.25])
    assert metrics == {"kl_reward": pytest.approx(1.9 / 9, abs=1e-7)}
    # in the loss (the default), the rewards stay as they are and no kl_reward is reported
    adv, _, metrics = advantages(logp=LOGP, ref_logp=REF_LOGP, **{**knobs, "kl_in": "loss"})
    close(adv, [0.5, -0.5, 1.0, -1.0])
    assert metrics == {}


def test_kl_in_reward_per_token_for_reinforce_pp():
    # token rewards -0.5 * k1: [-0.1 -0.05 0], [-0.2 -0.1 -], [0 0 0], [-0.5 - -]; gamma 1 returns sum
    # from each token to the end plus the sequence reward: [0.85 0.95 1], [-0.3 -0.1 -], [2 2 2], [-0.5 - -]
    # sum 7.9, sum of squares 14.975; mean 7.9 / 9, variance (14.975 - 7.9^2 / 9) / 8
    adv, _, metrics = advantages(logp=LOGP, ref_logp=REF_LOGP, adv_estimator="reinforce_pp", kl_in="reward",
                                 beta=0.5, kl_estimator="k1")
    ret = torch.tensor([[0.85, 0.95, 1.0], [-0.3, -0.1, 0.0], [2.0, 2.0, 2.0], [-0.5, 0.0, 0.0]])
    mean, std = 7.9 / 9, ((14.975 - 7.9 ** 2 / 9) / 8) ** 0.5
    close(adv, ((ret - mean) / std * MASK).tolist())
    assert metrics["kl_reward"] == pytest.approx(1.9 / 9, abs=1e-7)


def test_kl_in_reward_k3():
    # k3 = exp(d) - d - 1 with d = ref - logp on the unmasked tokens: d = -0.2 (twice) -> 0.0187308,
    # -0.1 -> 0.0048374, -0.4 -> 0.0703200, -1.0 -> 0.3678794, 0 (four times) -> 0; mean over 9 tokens
    _, _, metrics = advantages(logp=LOGP, ref_logp=REF_LOGP, adv_scale="none", kl_in="reward", beta=0.5)
    assert metrics["kl_reward"] == pytest.approx((0.0187308 * 2 + 0.0048374 + 0.0703200 + 0.3678794) / 9, abs=1e-6)


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown adv_estimator 'ppo2'"):
        advantages(adv_estimator="ppo2")
