"""Every key of `rlvr train --help` reaches the code that reads it and does what it promises there: for each
key, a value other than the default gives the effect the key promises (a bound, a count, a dtype, the same
values within rounding by another mechanism, ...), asserted by the effect function in its table entry; where
a key has no definite effect to assert here (a seed, an objective's knob whose maths tests/algo and
tests/compat pin), the entry is Differs(why) and the check asserts only that the key moves what the phase
produces. A key a CPU cannot show is listed with the reason.

The table of keys is the config's own (rlvr.config.describe, what --help prints), so a new key fails
`test_every_key_is_checked_once` (test_every_key.py) until it is given a check. The keys are checked where
their effect is whole, through the functions a run builds itself with (one tiny-random policy, no run
directory), a module per phase, each with its table:

- LEARN (test_update_keys.py): the update phase, `rlvr.train.step.learn` (make_batch, policy_update, the schedule, the
  reference sync) on one fixed scored batch, twice, with the run's own builders (Settings.of and
  assemble.models_of): its metrics, the weights after it and the learning rate;
- ROLLOUT (test_rollout_keys.py): the rollout phase, `collect` on a Run built by those builders (the engine of
  make_engine, the sampling settings, the per-group seeds, the rewards): its texts, log-probs, scores;
- DATA (test_data_keys.py): the problems (build_splits), the prompt order (build_sampler), the episodes' environment
  (make_spec, one greedy episode), evaluation's settings;
- MODELS (test_model_keys.py): how the policy's weights are held;
- RUN (tests/e2e/test_key_reach_runs.py): what only a whole run shows (files, steps, checkpoints).
Each check compares with the same harness at the defaults (plus the check's context: e.g. a SAPO
knob is checked with algo.policy_loss=sapo). The base observation of each context is made once per module
(`cached`), not once per key. This module holds what the phases share: the harness, the check, the fixtures.
"""
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from rlvr.config import build_config, describe
from rlvr.envs.episodes import make_spec, run_episodes
from rlvr.models import load_model, stop_token_ids
from rlvr.rewards.base import Scores
from rlvr.rollout.engines import builtin_engine
from rlvr.tasks import build_splits
from rlvr.train.settings import Settings
from rlvr.train.state import Collected


KEYS = [key for key, _, _ in describe()]
DATA_DIR = Path(__file__).parent / "data"  # the file tasks' rows
BASE = ["--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=4", "--rollout.prompts_per_step=2",
        "--rollout.group_size=4", "--rollout.max_new_tokens=6", "--eval.max_new_tokens=6"]


def _cfg(*overrides):
    return build_config(None, [*BASE, *[str(o) for o in overrides]])


def _arg(key, value):
    return f"--{key}={json.dumps(value)}"  # JSON is YAML: a string stays a string


# ---------------------------------------------------------------- what a check asserts

@dataclass(frozen=True)
class Differs:
    """A key with no definite value to assert here: its check asserts only that it moves the phase's output,
    and `why` says why nothing more definite can be asserted (and where its maths is pinned)."""

    why: str


@dataclass(frozen=True)
class SameAs:
    """The key is a name for other keys' values: the changed observation equals the one of the context with
    these overrides instead, to the last bit."""

    overrides: tuple[str, ...]


MATHS = "the objective's maths; tests/algo and the verl/TRL parity tests (tests/compat) pin it with hand values"
ADVANTAGES = "the advantages' maths; tests/algo/test_advantages.py and tests/compat/test_verl_advantages.py pin it"
SEEDED = "a seed: which values it draws has no closed form, only that they are others"


def close(a: float, b: float, rel: float, tiny: float = 1e-7) -> bool:
    """a and b within rel of the larger, or both within `tiny` of each other (a loss of 1e-8 is a zero's
    rounding: the group-centred advantages sum to 0 and the first pass's ratio is 1)."""
    return abs(a - b) <= rel * max(abs(a), abs(b)) + tiny


def vec(tensors: dict) -> torch.Tensor:
    return torch.cat([t.flatten() for _, t in sorted(tensors.items())])


# keys known not to reach their code today (strict xfail: the test fails once they do, to move them)
KNOWN_UNREACHED: dict[str, str] = {}


def check(table, key, observe, base_of, phase):
    """The key's effect at the check's context: its table's effect function on (the context's observation,
    made once per module by base_of, and the one with the key changed on top), or for Differs that they
    differ, or for SameAs that the changed one is the other overrides' to the last bit."""
    value, context, effect = table[key]
    base, changed = base_of(context), observe((*context, _arg(key, value)))
    if key in KNOWN_UNREACHED:
        if base.key() == changed.key():
            pytest.xfail(KNOWN_UNREACHED[key])
        pytest.fail(f"{key} now reaches {phase}: take it out of KNOWN_UNREACHED")
    if isinstance(effect, Differs):
        assert changed.key() != base.key(), f"{key}={value!r} changes nothing in {phase}"
    elif isinstance(effect, SameAs):
        assert changed.key() != base.key(), f"{key}={value!r} changes nothing in {phase}"
        assert changed.key() == base_of((*context, *effect.overrides)).key()
    else:
        effect(base, changed)


def cached(observe):
    """observe, remembering each context's observation: every key checked in a context compares with one."""
    seen = {}

    def base_of(context):
        if context not in seen:
            seen[context] = observe(context)
        return seen[context]
    return base_of


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's ops are too small to share out: one thread is faster, and far faster when the
    machine's cores are busy (a learn check: 1.2 s on one thread against 10 s on two, on a shared 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def batch_world():
    """One scored batch of 2 prompts x 4 completions of the arithmetic task by tiny-random, with a
    sampler's log-probs moved off the trainer's (as an int8 or vLLM sampler's are), so sampler
    corrections act, and rewards that differ within each group."""
    torch.manual_seed(0)
    cfg = _cfg()
    policy, tok = load_model("tiny-random")
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision="no")
    splits = build_splits(cfg.task)
    spec = make_spec(cfg.env, tok, splits.few_shot)
    problems = splits.train[:2]
    ep = run_episodes(builtin_engine(policy), spec, problems, group_size=4, sampling=settings.rollout.sampling,
                      seeds=[1, 2])
    r = ep.rollout
    shift = torch.linspace(-0.6, 0.6, r.sampler_logp.numel()).view_as(r.sampler_logp)
    r.sampler_logp = (r.sampler_logp + shift) * r.completion_mask
    totals = [1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.25, 0.75]
    scores = Scores(per_function={"v": totals}, reasons={"v": [""] * 8}, total=totals, failed={"v": [False] * 8})
    collected = Collected(problems=problems, rollout=r, texts=ep.texts, scores=scores, metrics={})
    return policy, tok, splits, spec, collected


def slow_reward(completions, **kw):
    """Takes half a second a call: past rewards.timeout_s=0.2."""
    time.sleep(0.5)
    return [0.0] * len(completions)


def pid_reward(completions, **kw):
    """Scores with the id of the process that calls it: the trainer's, or rewards.isolate's worker's."""
    return [float(os.getpid())] * len(completions)
