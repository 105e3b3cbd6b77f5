"""Key reach, the rollout phase: each key of ROLLOUT changes one step's collection (`collect`: the engine's
samples, the rewards, the environment) as it promises (tests/key_reach/harness.py says how a check is made)."""
import copy
import os
from dataclasses import dataclass, field

import pytest
import torch

from rlvr.errors import RlvrError
from rlvr.envs.episodes import make_spec
from rlvr.models import stop_token_ids
from rlvr.rewards import rewards_of
from rlvr.rollout.engines import make_engine
from rlvr.tasks import build_splits
from rlvr.tasks.curriculum import build_sampler
from rlvr.train.step import collect
from rlvr.train.settings import Settings, engine_settings
from rlvr.train.state import Data, Models, Run

from tests.key_reach.harness import Differs, SEEDED, _cfg, cached, check


@dataclass
class Sampled:
    """One step's collection (sample_and_score), or the error the run stops with."""

    error: str = ""
    prompts: list = field(default_factory=list)  # each group's prompt, decoded
    lengths: list = field(default_factory=list)  # each row's completion tokens (the environment's too)
    scores: dict = field(default_factory=dict)  # reward name -> each row's score
    metrics: dict = field(default_factory=dict)
    rollout: object = None
    texts: list = field(default_factory=list)
    few_shot: list = field(default_factory=list)  # the task's worked examples (question, solution)
    policy: object = None  # the weights it sampled from, to recompute its distribution

    def key(self) -> tuple:
        if self.error:
            return (self.error,)
        r = self.rollout
        return (self.texts, sorted(self.scores.items()), [round(float(x), 6) for x in r.sampler_logp.flatten()],
                r.prompt_ids, sorted(self.metrics))


def rollout_observable(world, overrides, tmp_path) -> Sampled:
    """One step's collection (sample_and_score) under cfg, with the run's own builders."""
    policy0, tok, _, _, _ = world
    cfg = _cfg(*overrides)
    torch.manual_seed(0)
    splits = build_splits(cfg.task)
    policy = copy.deepcopy(policy0)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision="no")
    data = Data(splits=splits, env=make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt),
                rewards=rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), sampler=build_sampler(cfg.curriculum, splits.train, cfg.train.seed))
    run = Run(settings=settings, models=Models(policy=policy, tok=tok), data=data,
              engine=make_engine(engine_settings(cfg), policy, tmp_path), out=tmp_path)
    try:
        c = collect(run, 1)
    except RlvrError as e:  # what a run stops with (rewards.timeout_s) is what it shows
        return Sampled(error=str(e))
    r = c.rollout
    present = r.completion_mask if r.env_mask is None else (r.completion_mask + r.env_mask).clamp(max=1)
    return Sampled(prompts=[tok.decode(p) for p in r.prompt_ids], lengths=present.sum(-1).int().tolist(),
                   scores=dict(c.scores.per_function), metrics=dict(c.metrics), rollout=r, texts=c.texts,
                   few_shot=list(splits.few_shot), policy=policy)


def token_stats(obs: Sampled, temperature: float = 1.0) -> tuple[list[int], list[float], torch.Tensor]:
    """For every sampled token: its rank in the policy's distribution there (0: the most likely), the mass of
    the tokens more likely than it, and (a [B, Tc] tensor, 0 off the tokens) its log-prob at `temperature`."""
    r, ranks, before = obs.rollout, [], []
    logp = torch.zeros_like(r.sampler_logp)
    with torch.no_grad():
        for row in range(r.completion_ids.shape[0]):
            prompt, n = r.prompt_ids[row // r.group_size], int(r.completion_mask[row].sum())
            ids = torch.tensor([prompt + r.completion_ids[row, :n].tolist()])
            logits = obs.policy(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + n].float()
            probs = logits.softmax(-1)
            for t in range(n):
                tok = int(r.completion_ids[row, t])
                above = probs[t] > probs[t, tok]
                ranks.append(int(above.sum()))
                before.append(float(probs[t][above].sum()))
            logp[row, :n] = (logits / temperature).log_softmax(-1).gather(-1, r.completion_ids[row, :n, None])[:, 0]
    return ranks, before, logp


def sampler_gap(obs: Sampled, temperature: float = 1.0) -> float:
    """The largest |sampler log-prob - the policy's own| over the sampled tokens."""
    r = obs.rollout
    return float(((r.sampler_logp - token_stats(obs, temperature)[2]).abs() * r.completion_mask).max())


def rows_of(prompts: int, group: int):
    def effect(base: Sampled, changed: Sampled) -> None:
        """The batch is prompts x group rows."""
        assert (len(base.prompts), len(base.lengths)) == (2, 8)
        assert (len(changed.prompts), len(changed.lengths)) == (prompts, prompts * group)
    effect.__doc__ = f"{prompts} prompts x {group} completions"
    return effect


def at_most(n: int, base_n: int = 6):
    def effect(base: Sampled, changed: Sampled) -> None:
        """No completion is longer than n tokens (the base's reach past it)."""
        assert max(changed.lengths) <= n < max(base.lengths) <= base_n, (changed.lengths, base.lengths)
    effect.__doc__ = f"every completion at most {n} tokens"
    return effect


def tempered(base: Sampled, changed: Sampled) -> None:
    """The sampler's log-probs are the policy's at temperature 0.5 (the base's at 1)."""
    assert sampler_gap(base, 1.0) < 1e-4 and sampler_gap(changed, 0.5) < 1e-4
    assert sampler_gap(changed, 1.0) > 1e-2


def top_k(base: Sampled, changed: Sampled) -> None:
    """Each token is one of the 3 most likely there (the base draws others too)."""
    assert max(token_stats(changed)[0]) < 3 <= max(token_stats(base)[0])


def top_p(base: Sampled, changed: Sampled) -> None:
    """Each token is in the nucleus of mass 0.5: the tokens more likely than it hold less than 0.5."""
    assert max(token_stats(changed)[1]) < 0.5 <= max(token_stats(base)[1])


def int8_copy(base: Sampled, changed: Sampled) -> None:
    """int8: a re-quantised copy samples, so its log-probs are not the policy's own (the base's are, to
    rounding); within int8's error of them (a bound of 0.5 nats a token: measured 0.1)."""
    assert sampler_gap(base) < 1e-4 and 1e-3 < sampler_gap(changed) < 0.5, (sampler_gap(base), sampler_gap(changed))


def rewarded_by(names: set):
    def effect(base: Sampled, changed: Sampled) -> None:
        assert set(base.scores) == {"correctness", "format"} and set(changed.scores) == names
    effect.__doc__ = f"the rewards are {sorted(names)}"
    return effect


def overlong(buffer: int, penalty: float, name: str = "length"):
    def effect(base: Sampled, changed: Sampled) -> None:
        """The length reward is DAPO's soft overlong punishment at max 6 tokens: 0 up to 6 - buffer tokens,
        then falling linearly to -penalty at 6 (computed here from each completion's length)."""
        free = 6 - buffer
        want = [-penalty * min(n - free, buffer) / buffer if n > free else 0.0 for n in changed.lengths]
        assert changed.scores[name] == pytest.approx(want, abs=1e-12)
        assert changed.scores[name] != base.scores.get(name)
    return effect


def refilled(most: int):
    def effect(base: Sampled, changed: Sampled) -> None:
        """Groups whose rewards are all equal are dropped and refilled: every kept group has unequal rewards,
        else (none informative: a random model's) the refill ran its `most` extra rounds."""
        totals = torch.tensor([sum(v) for v in zip(*changed.scores.values())]).view(-1, 4)
        mixed = bool((totals != totals[:, :1]).any(-1).all())
        assert mixed or changed.metrics["dynamic/rounds"] == 1 + most, (totals, changed.metrics)
        assert base.metrics.get("dynamic/rounds") != changed.metrics["dynamic/rounds"]
    return effect


def prompts_hold(text: str, absent_in_base: bool = True):
    def effect(base: Sampled, changed: Sampled) -> None:
        assert all(text in p for p in changed.prompts), changed.prompts[0]
        assert not absent_in_base or not any(text in p for p in base.prompts)
    effect.__doc__ = f"every prompt holds {text!r}"
    return effect


def few_shot(base: Sampled, changed: Sampled) -> None:
    """A worked example (the task's own: its question and solution) before the question."""
    (question, solution), = changed.few_shot[:1]
    assert all(question in p and solution.splitlines()[-1] in p for p in changed.prompts)
    assert not any(question in p for p in base.prompts)


def tools_offered(base: Sampled, changed: Sampled) -> None:
    """The tools environment: the prompt tells how to call a tool, and offers the calculator."""
    assert all("<tool_call>" in p and "calculator" in p for p in changed.prompts), changed.prompts[0]
    assert not any("<tool_call>" in p for p in base.prompts)


def python_offered(base: Sampled, changed: Sampled) -> None:
    """The python tool offered instead of the calculator."""
    assert all("python" in p and "calculator" not in p for p in changed.prompts), changed.prompts[0]
    assert all("calculator" in p for p in base.prompts)


def timed_out(base: Sampled, changed: Sampled) -> None:
    """A reward call that takes 0.5 s stops the run past 0.2 s, naming the reward and the limit."""
    assert not base.error
    assert "slow_reward" in changed.error and "rewards.timeout_s=0.2" in changed.error, changed.error


def isolated(base: Sampled, changed: Sampled) -> None:
    """The user's reward runs in a worker process of its own (it scores with its pid)."""
    assert set(base.scores[PID]) == {float(os.getpid())}
    pids = set(changed.scores[PID])
    assert len(pids) == 1 and pids != {float(os.getpid())} and pids != {0.0}, pids


SLOW = "tests.key_reach.harness:slow_reward"
PID = "tests.key_reach.harness:pid_reward"
# key -> (value, context, effect)
ROLLOUT = {
    "rollout.prompts_per_step": (3, (), rows_of(3, 4)),
    "rollout.group_size": (2, (), rows_of(2, 2)),
    "rollout.max_new_tokens": (3, (), at_most(3)),
    "rollout.temperature": (0.5, (), tempered),
    "rollout.top_p": (0.5, (), top_p),
    "rollout.top_k": (3, (), top_k),
    "rollout.weights": ("int8", (), int8_copy),
    "rollout.engine": ("hf", (), Differs("hf's generate samples the same distribution through its own random "
                                         "stream: other tokens from the same seeds, no definite ones")),
    "train.seed": (1, (), Differs(SEEDED)),
    "rewards.weights": ({"format": 1.0}, (), rewarded_by({"format"})),
    "rewards.soft_overlong": (True, ("--rewards.overlong_buffer=4",), overlong(4, 1.0)),
    "rewards.overlong_buffer": (2, ("--rewards.weights={'length': 1.0}",), overlong(2, 1.0)),
    "rewards.overlong_penalty": (5.0, ("--rewards.weights={'length': 1.0}",), overlong(8, 5.0)),
    "algo.dynamic_sampling": (True, (), refilled(3)),
    "algo.max_refill": (0, ("--algo.dynamic_sampling=true",), refilled(0)),
    "env.name": ("tools", (), tools_offered),
    "env.tools": (["python"], ("--env.name=tools",), python_offered),
    "env.example": ([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], ("--env.name=tools",),
                    prompts_hold("2+2?")),
    "env.max_episode_tokens": (3, ("--env.name=tools",), at_most(3)),
    "rewards.timeout_s": (0.2, (f"--rewards.weights={{{SLOW}: 1.0}}",), timed_out),
    "rewards.isolate": (True, (f"--rewards.weights={{{PID}: 1.0}}",), isolated),
    "task.system_prompt": ("Answer in one word.", (), prompts_hold("Answer in one word.")),
    "task.few_shot": (1, (), few_shot),
}


@pytest.fixture(scope="module")
def sampled(batch_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("rollout-base")
    return cached(lambda o: rollout_observable(batch_world, o, out))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(ROLLOUT))
def test_rollout_key_does_what_it_promises(batch_world, sampled, key, tmp_path):
    check(ROLLOUT, key, lambda o: rollout_observable(batch_world, o, tmp_path), sampled, "the rollout phase")
