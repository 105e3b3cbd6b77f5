"""The RL loop learns: 8 steps of the real loop (rlvr train on tiny-random, one thread, seeded) on a
reward the model can learn, the share of digits in its completion (about 10 of the tiny tokenizer's 100
tokens, so ~0.1 at random weights). A sign or normaliser regression in advantages, loss or update, or an
optimizer that does not step, fails here long before a demo would show it (with optimizer.lr=0 the share
stays at ~0.1, and each check fails).

One learning check per objective family, at the smallest size that still learns clearly (8 steps of 4 x 8
at lr 3e-2: measured 0.16 -> 0.97 over the first and last 3 steps; lr 0: 0.11 -> 0.11): the ratio objectives
(grpo; with one pass per batch the ratio is 1, where sapo's gate, gmpo's geometric mean and the clip_cov /
kl_cov selections give the clipped surrogate's gradient: sapo's and gmpo's runs measured the same shares
as grpo's to the last digit), and a detached weight times log pi (cispo; vespo and gpg are of its kind).
The parity tests (tests/compat, tests/algo) pin every objective's maths, so a learning run per preset
would add time, not checks. The negative control is the same run with the reward's weight -1:
group advantages are centred and scaled, so that flips the sign of every advantage, and the share must not
rise. Beside them, the two ways of training whose data path differs from the default's: rollouts one step
off, and bf16 weights over fp32 masters (packed forwards give the default's values within rounding:
tests/key_reach/)."""
import json

import pytest

from rlvr.algo.objectives import REGISTRY
from rlvr.cli import main
from rlvr.rewards import completion_text

STEPS = 8


def digit_share(completions, **columns) -> list[float]:
    texts = [completion_text(c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def digit_share_per_step(tmp_path, weight: float, preset: str = "grpo", *extra: str) -> list[float]:
    out = tmp_path / f"w{weight}"
    assert main(["train", "--model.name=tiny-random", f"--algo.preset={preset}", f"--rewards.weights={{'{__name__}:digit_share': {weight}}}",
                 "--rollout.prompts_per_step=4", "--rollout.group_size=8", "--rollout.max_new_tokens=8",
                 "--optimizer.lr=3e-2", f"--train.steps={STEPS}", "--train.threads=1", "--train.seed=0",
                 "--eval.before=false", "--eval.after=false", "--train.eval_every=0", "--train.save_every=0",
                 "--task.heldout_size=2", "--task.ood_size=2", f"--train.out={out}", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS
    return [m[f"reward/{__name__}:digit_share/mean"] for m in rows]


def assert_learns(share: list[float]) -> None:
    first, last = sum(share[:3]) / 3, sum(share[-3:]) / 3
    assert first < 0.3, share  # random weights: about 10 digits in 100 tokens
    assert last > 0.8 and last > first + 0.5, share


# one preset per objective family (the module docstring); the default's in the fast tier
FAMILIES = ["grpo", pytest.param("cispo", marks=pytest.mark.slow)]
# every objective of the registry with a preset -> the family whose check covers it
FAMILY_OF = {"sapo": "grpo", "gmpo": "grpo", "clip_cov": "grpo", "kl_cov": "grpo", "cispo": "cispo", "gpg": "cispo",
             "vespo": "cispo"}


def test_every_objective_has_a_family():
    """A new objective is given a family here (or a learning check of its own, as a family of one)."""
    assert sorted(name for name, entry in REGISTRY.items() if entry.preset is not None) == sorted(FAMILY_OF)


@pytest.mark.parametrize("preset", FAMILIES)
def test_the_loop_raises_a_learnable_reward(tmp_path, preset):
    assert_learns(digit_share_per_step(tmp_path, 1.0, preset))


def test_flipped_advantages_do_not_raise_it(tmp_path):
    share = digit_share_per_step(tmp_path, -1.0)
    first, last = sum(share[:3]) / 3, sum(share[-3:]) / 3
    assert last <= first, share


def test_one_step_off_raises_it_too(tmp_path):
    """Each batch sampled from the weights one update old (rollout.overlap), with the sampler correction."""
    assert_learns(digit_share_per_step(tmp_path, 1.0, "grpo", "--rollout.overlap=one_step_off"))


def test_bf16_weights_learn_it_and_checkpoint_their_fp32_masters(tmp_path):
    """Full fine-tuning with bf16 weights (the forward and backward in bf16, AdamW over fp32 masters,
    rlvr/train/optim.py MasterAdamW) learns as the fp32 run does, and its checkpoint holds the masters: fp32,
    one per weight, the bf16 weights their rounding."""
    import torch

    from rlvr.train.checkpoint import checkpoints, load_checkpoint

    assert_learns(digit_share_per_step(tmp_path, 1.0, "grpo", "--model.dtype=bfloat16",
                                       f"--train.save_every={STEPS}"))
    state = load_checkpoint(checkpoints(tmp_path / "w1.0")[-1])
    weights, saved = state["policy"], state["optimizer"]["state"]["state"]
    assert set(saved) == set(weights) - {"lm_head.weight"} and len(saved) > 10  # the head is the tied embedding
    for name, entry in saved.items():
        master = entry["master"]
        assert master.dtype == torch.float32 and torch.equal(master.to(torch.bfloat16), weights[name]), name
    assert any(not torch.equal(e["master"], weights[n].float()) for n, e in saved.items())  # finer than bf16
