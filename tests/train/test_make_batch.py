"""make_batch on a real run (tiny-random): the KL that kl_in: reward presets fold into the reward compares
the trainer's log-probs with the reference's, never the sampler's: with an int8 rollout copy
the sampler is off the trainer, and at step 0, where policy and reference are the same weights, the KL
must be exactly 0. A non-finite sampler log-prob leaves the loss and is counted."""
import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.train.batch import make_batch
from rlvr.train.grpo import collect
from rlvr.train.logprobs import completion_logprobs
from rlvr.train.assemble import setup
from rlvr.train.update import policy_update


def tiny_run(tmp_path, *extra):
    cfg = build_config(None, ["--model.name=tiny-random", "--rollout.weights=int8", "--rollout.prompts_per_step=2",
                              "--rollout.group_size=3", "--rollout.max_new_tokens=6", "--task.heldout_size=2",
                              "--task.ood_size=2", "--train.threads=1", f"--train.out={tmp_path}", *extra])
    return setup(cfg)


@pytest.mark.parametrize("preset", ["rloo", "reinforce_pp", "ppo"])
def test_kl_reward_is_zero_at_equal_weights_with_int8_rollouts(tmp_path, preset):
    run = tiny_run(tmp_path, f"--algo.preset={preset}")
    s = run.settings.update
    c = collect(run, 1)
    r = c.rollout
    trainer = completion_logprobs(run.models.policy, r.prompt_ids, r.completion_ids, r.completion_mask, r.group_size,
                                  s.pad_id, s.temperature).detach()
    gap = ((trainer - r.sampler_logp).abs() * r.completion_mask).amax()
    assert gap > 1e-3  # the int8 sampler really is off-policy, so the sampler's log-probs would show a KL
    _, metrics = make_batch(run, c)
    assert metrics["kl_reward"] == 0.0


def test_a_minus_inf_sampler_logprob_leaves_the_loss_and_is_counted(tmp_path):
    run = tiny_run(tmp_path, "--rollout.tis_cap=2.0", "--algo.aggregation=token-mean")
    c = collect(run, 1)
    mask = c.rollout.completion_mask.clone()
    c.rollout.sampler_logp[0, 0] = -math.inf
    c.rollout.sampler_logp[4, 1] = math.nan
    batch, metrics = make_batch(run, c)
    assert metrics["rollout/nonfinite_logp_tokens"] == 2
    assert float(batch.completion_mask.sum()) == float(mask.sum()) - 2
    assert batch.completion_mask[0, 0] == 0 and batch.env_mask[0, 0] == 1  # still attended to, not scored
    assert torch.isfinite(batch.sampler_logp).all()
    m = policy_update(run.models.policy, run.models.optimizer, batch, run.settings.update)
    assert m["skipped_updates"] == 0 and math.isfinite(m["loss"]) and math.isfinite(m["rollout/logp_mismatch_max"])
