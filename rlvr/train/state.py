"""What a run holds: `Run` (its settings by phase, its `Models`, its `Data`, the rollout engine and the run
directory; built by rlvr/train/assemble.py), `Progress` (what the loop carries from step to step;
checkpointed) and `Collected` (one step's scored rollouts). Plain dataclasses; the config itself is not
held: what a phase reads of it is in `settings` (rlvr/train/settings.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlvr.envs.episodes import EnvSpec
from rlvr.eval.grader import Grader
from rlvr.rewards.base import RewardFunction, Scores
from rlvr.rollout.decoding import Rollout, concat_rollouts
from rlvr.rollout.engines import RolloutEngine
from rlvr.tasks import Problem, Splits
from rlvr.tasks.curriculum import CurriculumSampler
from rlvr.train.distributed import Dist
from rlvr.train.forward import Reference


@dataclass(kw_only=True)
class Models:
    """The weights a run trains or reads, and what steps them (rlvr sft: the policy and tokenizer only)."""

    policy: torch.nn.Module
    tok: object
    ref: Reference | None = None  # the KL reference (algo.beta > 0)
    critic: torch.nn.Module | None = None  # PPO's value head (algo.adv_estimator gae)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: object = None


@dataclass(kw_only=True)
class Data:
    """The problems, how an episode of one runs, how it is scored, and which a step sees."""

    splits: Splits
    env: EnvSpec  # every problem is an episode: its prompt, its turns, their limits
    rewards: list[RewardFunction] = field(default_factory=list)
    grader: Grader = field(default_factory=Grader)  # what evaluation counts as correct (rlvr.eval.grader)
    sampler: CurriculumSampler | None = None  # the train prompts of each step (rlvr sft: none)


@dataclass(kw_only=True)
class Run:
    """Everything a run holds between steps."""

    # each phase's settings, built once from the config: rlvr.train.settings.Settings (a name only here:
    # settings.py imports the update, which imports this module)
    settings: Settings
    models: Models
    data: Data
    engine: RolloutEngine
    out: Path  # the run directory
    dist: Dist = field(default_factory=Dist)  # this process's place under torchrun, and its device
    baseline: dict = field(default_factory=dict)  # split -> greedy records before training (flips)
    warned: set = field(default_factory=set)  # reward functions whose first error was reported
    trackers: list = field(default_factory=list)  # started as the run directory is claimed (rank 0)


@dataclass(kw_only=True)
class Progress:
    """What the loop carries from step to step besides models and optimizer; all of it is checkpointed."""

    step: int = 0
    summary: dict = field(default_factory=lambda: {"steps": 0})
    history: list[dict] = field(default_factory=list)  # metric rows, for the health rules
    eval_rows: list[dict] = field(default_factory=list)
    fired: set = field(default_factory=set)  # health rules that already fired
    train_seconds: float = 0.0  # training time before this process (resumed runs)
    eval_seconds: float = 0.0  # mid-run evaluation time, left out of train_seconds
    # algo.adaptive_entropy's controller (rlvr.train.update.EntropyState): its coefficient (None: not
    # started, algo.entropy_coef) and the last step's watched entropy (none yet: inf)
    entropy_coef: float | None = None
    last_entropy: float = math.inf


@dataclass(kw_only=True)
class Collected:
    """One step's batch: the problems, their G episodes each, the final answers' texts and their scores."""

    problems: list[Problem]
    rollout: Rollout
    texts: list[str]
    scores: Scores
    metrics: dict  # about the collection itself (dynamic sampling's dropped groups and rounds)
    episodes: list[dict] = field(default_factory=list)  # each row's turns, calls and end (rlvr/envs/episodes.py)
    # the prompt sampler's metrics once this batch was observed, read then: one step off, the next batch's
    # collection observes its own while this one trains
    sampler: dict = field(default_factory=dict)


def merge_collected(parts: list[Collected], pad_id: int) -> Collected:
    """One batch from several (groups kept by dynamic sampling, or every rank's shard)."""
    return Collected(problems=[p for c in parts for p in c.problems],
                     rollout=concat_rollouts([c.rollout for c in parts], pad_id),
                     texts=[t for c in parts for t in c.texts], scores=Scores.concat([c.scores for c in parts]),
                     metrics={},
                     episodes=[e for c in parts for e in c.episodes])
