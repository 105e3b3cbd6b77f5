"""A resume takes every setting it accepts as changed from the next step, or refuses it with the reason.

tests/key_reach/ shows each key of the update and the rollout phases moving what that phase
produces; here the same keys are changed at a resume instead: a run under the check's context learns a
step and is checkpointed, then is restored (restore_checkpoint, as `rlvr train --resume` restores it) under
the context with the key changed, and its next step (the update, or the next batch's collection) must
differ from the same resume without the change. What a checkpoint restores (the optimizer's groups, the
schedule, the sampler's position, the generators, the entropy controller) must not put the old setting
back. The keys a resume refuses are listed with the words of the refusal."""
import copy

import pytest
import torch

from rlvr.config import to_dict, to_yaml
from rlvr.device import resolve_precision
from rlvr.envs.episodes import make_spec
from rlvr.errors import RlvrError
from rlvr.models import stop_token_ids
from rlvr.rewards import rewards_of
from rlvr.rollout.engines import make_engine
from rlvr.tasks import build_splits
from rlvr.tasks.curriculum import build_sampler
from rlvr.train.assemble import models_of
from rlvr.train.checkpoint import checkpoint_state, restore_checkpoint
from rlvr.train.distributed import Dist
from rlvr.train.optim import current_lr
from rlvr.train.settings import Settings, engine_settings
from rlvr.train.state import Data, Progress, Run
from rlvr.train.step import collect, learn
from rlvr.train.update import EntropyState

from tests.key_reach.harness import _arg, _cfg, batch_world, one_thread  # noqa: F401 (fixtures)
from tests.key_reach.test_rollout_keys import ROLLOUT
from tests.key_reach.test_update_keys import LEARN

# key -> what the refusal says: under another value the checkpoint's weights are another model
REFUSED = {
    "model.lora.r": "model.lora.r=4",
    "model.lora.alpha": "model.lora.alpha=16",
    "model.lora.target_modules": "model.lora.target_modules=",
    # the bf16 KL reference is another module (fused bf16 linear layers) than the fp32 copy the checkpoint holds
    "train.mixed_precision": "train.mixed_precision=bf16",
    # the optimizer's saved state is in the other form (fp32 moments against 8-bit blocks): it cannot load
    "optimizer.state": "optimizer.state=8bit",
}
# checks whose context differs from tests/key_reach/'s: key -> (value, context)
CONTEXT = {
    # the batches after the checkpoint have no completion that ends before rollout.max_new_tokens (6), and
    # any buffer gives such a completion the whole penalty: longer completions, some ending earlier
    "rewards.overlong_buffer": (20, ("--rewards.weights={'length': 1.0}", "--rollout.max_new_tokens=40")),
}
CHECKPOINTS: dict[tuple, tuple] = {}  # context -> (the checkpoint's state, the config.yaml it ran under)


def build_run(world, cfg, out) -> Run:
    policy0, tok, _, _, _ = world
    splits = build_splits(cfg.task)
    policy = copy.deepcopy(policy0)
    precision = resolve_precision(cfg.train.mixed_precision, torch.device("cpu"))
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision=precision)
    data = Data(splits=splits, env=make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt),
                rewards=rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), sampler=build_sampler(cfg.curriculum, splits.train, cfg.train.seed))
    models = models_of(cfg, policy, tok, Dist(), precision)
    return Run(settings=settings, models=models, data=data, engine=make_engine(engine_settings(cfg), models.policy, out), out=out)


def checkpoint_of(world, context, tmp_path) -> tuple[dict, str]:
    """A run under `context` after one step (an update on the fixed batch, a batch's prompts drawn),
    checkpointed as the loop checkpoints it."""
    if context not in CHECKPOINTS:
        cfg = _cfg(*context)
        torch.manual_seed(0)
        run = build_run(world, cfg, tmp_path)
        entropy = EntropyState(cfg.algo.entropy_coef)
        update, _ = learn(run, copy.deepcopy(world[4]), 1, entropy)
        p = Progress(step=1)
        if cfg.algo.adaptive_entropy:
            entropy = entropy.after(run.settings.update.entropy, update["entropy/watched_mean"])
            p.entropy_coef, p.last_entropy = entropy.coef, entropy.last_entropy
        run.data.sampler.next(cfg.rollout.prompts_per_step, 1)
        CHECKPOINTS[context] = (checkpoint_state(run, p, 0.0), to_yaml(cfg))
    return CHECKPOINTS[context]


def resumed(world, context, changes, phase, tmp_path):
    """The checkpoint of a run under `context` resumed under context + changes, then its next step:
    the update (its metrics, the weights after it, the learning rate it used and the next one, the
    entropy controller's coefficient and its next one) or the next batch's collection."""
    state, saved = checkpoint_of(world, context, tmp_path)
    out = tmp_path / f"resume-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    (out / "config.yaml").write_text(saved)
    cfg = _cfg(*context, *changes, f"--train.out={out}")
    torch.manual_seed(0)
    run = build_run(world, cfg, out)
    try:
        p = restore_checkpoint(run, copy.deepcopy(state), out / "step_000001.pt", to_dict(cfg))
    except RlvrError as e:
        return "refused: " + str(e)
    if phase == "rollout":
        try:
            batches = [collect(run, step) for step in (2, 3)]  # two batches: more completions a setting may touch
        except RlvrError as e:  # what the run stops with (rewards.timeout_s) is what it shows
            return "stopped: " + str(e)
        return [(c.texts, sorted(c.scores.per_function.items()), c.rollout.prompt_ids,
                 [round(float(x), 6) for x in c.rollout.sampler_logp.flatten()]) for c in batches]
    e = run.settings.update.entropy
    entropy = EntropyState(e.coef if p.entropy_coef is None else p.entropy_coef, p.last_entropy)
    lr = current_lr(run.models.scheduler)
    update, adv = learn(run, copy.deepcopy(world[4]), 2, entropy)
    metrics = sorted((k, round(v, 10) if isinstance(v, float) else v) for k, v in {**update, **adv}.items())
    m = run.models
    held = [m.policy, m.critic, m.ref.model if m.ref is not None else None]  # the reference's sync too
    weights = [round(sum(float(w.detach().double().abs().sum()) for w in x.parameters()), 10) if x else None
               for x in held]
    after = entropy.after(e, update["entropy/watched_mean"]).coef if e.adaptive else None  # its next state
    return metrics, weights, lr, current_lr(run.models.scheduler), entropy.applied(e), after


def check_resume(table, key, phase, world, tmp_path):
    value, context = CONTEXT.get(key, table[key][:2])  # the tables' third item is their own effect check
    base = resumed(world, tuple(context), (), phase, tmp_path)
    changed = resumed(world, tuple(context), (_arg(key, value),), phase, tmp_path)
    assert not str(base).startswith("refused"), base
    if key in REFUSED:
        assert str(changed).startswith("refused") and REFUSED[key] in changed and "resume without" in changed, changed
        assert "nothing in the run directory was changed" in changed
        return
    assert not str(changed).startswith("refused"), f"the resume refused {key}={value!r}: {changed}"
    assert changed != base, f"{key}={value!r} at a resume changes nothing in the next step's {phase}"


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(LEARN))
def test_update_key_changed_at_a_resume_takes_effect(batch_world, key, tmp_path):
    check_resume(LEARN, key, "update", batch_world, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(ROLLOUT))
def test_rollout_key_changed_at_a_resume_takes_effect(batch_world, key, tmp_path):
    check_resume(ROLLOUT, key, "rollout", batch_world, tmp_path)


def test_resume_with_the_same_settings_restores_the_saved_rates(batch_world, tmp_path):
    """No change: the learning rate is the checkpoint's scheduled one (warm-up of 3 steps: step 2 runs at
    2/3 of optimizer.lr), and a changed lr is scheduled the same way from the next step."""
    context = ("--optimizer.warmup_steps=3", "--optimizer.lr=0.03")
    same = resumed(batch_world, context, (), "update", tmp_path)
    assert same[2] == pytest.approx(0.02, rel=1e-12) and same[3] == pytest.approx(0.03, rel=1e-12)
    changed = resumed(batch_world, context, ("--optimizer.lr=0.3",), "update", tmp_path)
    assert changed[2] == pytest.approx(0.2, rel=1e-12) and changed[3] == pytest.approx(0.3, rel=1e-12)
