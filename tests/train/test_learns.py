"""The RL loop learns: 20 steps of the real loop (rlvr train on tiny-random, one thread, seeded)
on a reward the model can learn, the share of digits in its completion (about 10 of the tiny tokenizer's
100 tokens, so ~0.1 at random weights). A sign or normaliser regression in advantages, loss or update
fails here long before a demo would show it.

The negative control is the same run with the reward's weight -1: group advantages are centred and
scaled, so that flips the sign of every advantage, and the digit share must not rise.

Every preset's objective runs the same check (the default, grpo, in the fast tier; the others slow)."""
import json

import pytest

from rlvr.algo.objectives import REGISTRY
from rlvr.cli import main
from rlvr.rewards import completion_text

STEPS = 20


def digit_share(completions, **columns) -> list[float]:
    texts = [completion_text(c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def digit_share_per_step(tmp_path, weight: float, preset: str = "grpo", *extra: str) -> list[float]:
    out = tmp_path / f"w{weight}"
    assert main(["train", "--model.name=tiny-random", f"--algo.preset={preset}", f"--rewards.weights={{'{__name__}:digit_share': {weight}}}",
                 "--rollout.prompts_per_step=4", "--rollout.group_size=8", "--rollout.max_new_tokens=8",
                 "--optimizer.lr=1e-2", f"--train.steps={STEPS}", "--train.threads=1", "--train.seed=0",
                 "--eval.before=false", "--eval.after=false", "--train.eval_every=0", "--train.save_every=0",
                 "--task.heldout_size=2", "--task.ood_size=2", f"--train.out={out}", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS
    return [m[f"reward/{__name__}:digit_share/mean"] for m in rows]


# the presets of the objectives beside the clipped surrogate (the registry's), and LUSPO's aggregation
OBJECTIVE_PRESETS = [*(name for name, entry in REGISTRY.items() if entry.preset is not None), "luspo"]
PRESETS = ["grpo", *(pytest.param(p, marks=pytest.mark.slow) for p in OBJECTIVE_PRESETS)]


@pytest.mark.parametrize("preset", PRESETS)
def test_the_loop_raises_a_learnable_reward(tmp_path, preset):
    share = digit_share_per_step(tmp_path, 1.0, preset)
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert first < 0.3  # random weights: about 10 digits in 100 tokens
    assert last > 0.8 and last > first + 0.5, share  # measured: ~0.15 -> 1.00


@pytest.mark.parametrize("preset", PRESETS)
def test_flipped_advantages_do_not_raise_it(tmp_path, preset):
    share = digit_share_per_step(tmp_path, -1.0, preset)
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert last <= first, share  # measured: ~0.08 -> 0.00


def test_one_step_off_raises_it_too(tmp_path):
    """Each batch sampled from the weights one update old (rollout.overlap), with the sampler correction."""
    share = digit_share_per_step(tmp_path, 1.0, "grpo", "--rollout.overlap=one_step_off")
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert first < 0.3
    assert last > 0.8 and last > first + 0.5, share


def test_packed_forwards_raise_it_too(tmp_path):
    """The update's forwards padding-free (train.packed)."""
    share = digit_share_per_step(tmp_path, 1.0, "grpo", "--train.packed=true")
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert first < 0.3
    assert last > 0.8 and last > first + 0.5, share


def test_bf16_weights_learn_it_and_checkpoint_their_fp32_masters(tmp_path):
    """Full fine-tuning with bf16 weights (the forward and backward in bf16, AdamW over fp32 masters,
    rlvr/train/optim.py MasterAdamW) learns as the fp32 run does, and its checkpoint holds the masters: fp32,
    one per weight, the bf16 weights their rounding."""
    import torch

    from rlvr.train.checkpoint import checkpoints, load_checkpoint

    share = digit_share_per_step(tmp_path, 1.0, "grpo", "--model.dtype=bfloat16", f"--train.save_every={STEPS}")
    first, last = sum(share[:5]) / 5, sum(share[-5:]) / 5
    assert first < 0.3
    assert last > 0.8 and last > first + 0.5, share
    state = load_checkpoint(checkpoints(tmp_path / "w1.0")[-1])
    weights, saved = state["policy"], state["optimizer"]["state"]["state"]
    assert set(saved) == set(weights) - {"lm_head.weight"} and len(saved) > 10  # the head is the tied embedding
    for name, entry in saved.items():
        master = entry["master"]
        assert master.dtype == torch.float32 and torch.equal(master.to(torch.bfloat16), weights[name]), name
    assert any(not torch.equal(e["master"], weights[n].float()) for n, e in saved.items())  # finer than bf16
