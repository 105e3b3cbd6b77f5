"""The update's random draws come from generators seeded per step, never the global RNG: dropout masks
(SeededDropout, LoRA's among them) and Clip-Cov's picks."""
import torch

from rlvr.algo.policy import policy_loss
from rlvr.models import SeededDropout, apply_lora, seeded_dropouts, tiny_random
from rlvr.config.sections import LoraConfig
from rlvr.rollout.sampling import update_seed


def test_lora_dropouts_draw_their_masks_from_the_seeded_generator_alone():
    policy = apply_lora(tiny_random()[0], LoraConfig(r=4, dropout=0.5))
    drops = [m for m in policy.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops and all(type(m) is SeededDropout for m in drops)
    with torch.no_grad():  # B starts at zero, which would hide what the masks drop
        for name, w in policy.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(1, 17).view(2, 8)
    policy.train()

    def forward(seed):
        seeded_dropouts(policy, seed)
        state = torch.get_rng_state()
        out = policy(input_ids=ids).logits
        assert torch.equal(torch.get_rng_state(), state)  # the global generator did not move
        return out

    a, b, c = forward(1), forward(1), forward(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    policy.eval()
    assert torch.equal(policy(input_ids=ids).logits, policy(input_ids=ids).logits)  # no dropout in eval


def test_a_seeded_dropout_keeps_one_minus_p_of_its_inputs_scaled_up():
    drop = SeededDropout(0.25)
    drop.generator = torch.Generator().manual_seed(0)
    out = drop(torch.ones(100_000))
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert torch.all(out[kept] == 1 / 0.75)


def test_clip_cov_picks_from_its_generator():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=g) * 3
    adv = torch.randn(4, 6, generator=g)
    mask = torch.ones(4, 6)
    knobs = {"cov_ratio": 0.3, "clip_cov_lb": -100.0, "clip_cov_ub": 100.0}

    def picks(seed):
        state = torch.get_rng_state()
        _, m = policy_loss(logp, logp + 0.1, adv, mask, 0.2, 0.2, objective="clip_cov", params=knobs,
                           generator=torch.Generator().manual_seed(seed))
        assert torch.equal(torch.get_rng_state(), state)
        return m["objective/clipped_frac"]

    assert picks(1) == picks(1) > 0


def test_each_step_and_rank_has_its_own_update_seed():
    seeds = {update_seed(0, step, rank) for step in (1, 2) for rank in (0, 1)}
    assert len(seeds) == 4 and update_seed(0, 1, 0) == update_seed(0, 1, 0) != update_seed(1, 1, 0)
