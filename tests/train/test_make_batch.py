"""make_batch and the forwards around it on a real run (tiny-random): the KL that kl_in: reward presets fold into the reward compares
the trainer's log-probs with the reference's, never the sampler's: with an int8 rollout copy
the sampler is off the trainer, and at step 0, where policy and reference are the same weights, the KL
must be exactly 0. A non-finite sampler log-prob leaves the loss and is counted."""
import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.train import batch as batch_mod, update as update_mod
from rlvr.train.batch import make_batch, old_policy_forward, with_advantages
from rlvr.train.step import collect, train_step
from rlvr.train.forward import completion_logprobs
from rlvr.train.overlap import Rollouts
from rlvr.train.assemble import setup
from rlvr.train.update import policy_update, reference_forward


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
    batch, _ = make_batch(run, c)
    ref_logp = reference_forward(run.models.ref, batch, s)
    logp, values = old_policy_forward(run, batch)
    _, metrics = with_advantages(s.advantages, s.kl, batch, logp, ref_logp, values)
    assert metrics["kl_reward"] == 0.0


@pytest.mark.parametrize("preset, forwards", [
    ("grpo", {"reference": 1, "old_policy": 0, "update": 2}),  # KL in the loss: the reference per micro-batch
    ("rloo", {"reference": 1, "old_policy": 1, "update": 1}),  # KL in the reward: the policy before its update
    ("dr_grpo", {"reference": 0, "old_policy": 0, "update": 1}),  # no KL term, no critic: the update's forward only
])
def test_a_step_runs_the_forwards_its_loop_names(tmp_path, monkeypatch, preset, forwards):
    """make_batch runs no forward; the reference and old-policy forwards run only where a KL term or a critic
    needs them; the update runs one per micro-batch and iteration (grpo here: 2 iterations, 1 micro-batch)."""
    run = tiny_run(tmp_path, f"--algo.preset={preset}", *(["--algo.iterations=2"] if preset == "grpo" else []))
    seen = dict.fromkeys(forwards, 0)

    def counted(name, fn):
        def call(*a, **k):
            seen[name] += 1
            return fn(*a, **k)
        return call
    monkeypatch.setattr(update_mod, "reference_logprobs", counted("reference", update_mod.reference_logprobs))
    monkeypatch.setattr(batch_mod, "completion_forward", counted("old_policy", batch_mod.completion_forward))
    monkeypatch.setattr(update_mod, "completion_forward", counted("update", update_mod.completion_forward))
    c = collect(run, 1)
    make_batch(run, c)
    assert seen == dict.fromkeys(forwards, 0)
    with Rollouts(lambda step: collect(run, step), run.engine, run.models.policy, one_step_off=False) as rollouts:
        train_step(run, 1, rollouts)
    assert seen == forwards


def test_a_minus_inf_sampler_logprob_leaves_the_loss_and_is_counted(tmp_path):
    run = tiny_run(tmp_path, "--rollout.tis_cap=2.0", "--algo.aggregation=token-mean")
    c = collect(run, 1)
    mask = c.rollout.completion_mask.clone()
    c.rollout.sampler_logp[0, 0] = -math.inf
    c.rollout.sampler_logp[4, 1] = math.nan
    batch, metrics = make_batch(run, c)
    batch, _ = with_advantages(run.settings.update.advantages, run.settings.update.kl, batch)
    assert metrics["rollout/nonfinite_logp_tokens"] == 2
    assert float(batch.completion_mask.sum()) == float(mask.sum()) - 2
    assert batch.completion_mask[0, 0] == 0 and batch.env_mask[0, 0] == 1  # still attended to, not scored
    assert torch.isfinite(batch.sampler_logp).all()
    m = policy_update(run.models.policy, run.models.optimizer, batch, run.settings.update)
    assert m["skipped_updates"] == 0 and math.isfinite(m["loss"]) and math.isfinite(m["rollout/logp_mismatch_max"])
