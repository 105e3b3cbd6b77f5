"""The KL that kl_in: reward presets fold into the reward compares the trainer's log-probs with the
reference's, never the sampler's (issue 28): with an int8 rollout copy the sampler is off by ~0.06 nats
a token, and at step 0, where policy and reference are the same weights, the KL must be exactly 0."""
import pytest
import torch

from rlvr.config import build_config
from rlvr.train.grpo import collect, make_batch
from rlvr.train.logprobs import completion_logprobs
from rlvr.train.setup import setup


@pytest.mark.parametrize("preset", ["rloo", "reinforce_pp", "ppo"])
def test_kl_reward_is_zero_at_equal_weights_with_int8_rollouts(tmp_path, preset):
    cfg = build_config(None, ["--model.name=tiny-random", f"--algo.preset={preset}", "--rollout.weights=int8",
                              "--rollout.prompts_per_step=2", "--rollout.group_size=3", "--rollout.max_new_tokens=6",
                              "--task.heldout_size=2", "--task.ood_size=2", "--train.threads=1",
                              f"--train.out={tmp_path}"])
    run = setup(cfg)
    c = collect(run, 1)
    r = c.rollout
    trainer = completion_logprobs(run.policy, r.prompt_ids, r.completion_ids, r.completion_mask, r.group_size,
                                  run.pad_id, cfg.rollout.temperature).detach()
    gap = ((trainer - r.sampler_logp).abs() * r.completion_mask).amax()
    assert gap > 1e-3  # the int8 sampler really is off-policy, so the sampler's log-probs would show a KL
    _, metrics = make_batch(run, c)
    assert metrics["kl_reward"] == 0.0
