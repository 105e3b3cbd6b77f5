"""What a run holds: `Run` (models, data, optimizer, engine; built by rlvr/train/assemble.py), `Progress`
(what the loop carries from step to step; checkpointed) and `Collected` (one step's scored rollouts).
Plain dataclasses, so every phase of the loop can say `run: Run`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlvr.config import Config
from rlvr.envs.episodes import EnvSpec
from rlvr.eval.grader import Grader
from rlvr.rewards.base import RewardFunction, Scores
from rlvr.rollout.decoding import Rollout, concat_rollouts
from rlvr.rollout.engines import RolloutEngine
from rlvr.tasks import Problem, Splits
from rlvr.tasks.curriculum import CurriculumSampler
from rlvr.train.distributed import Dist
from rlvr.train.logprobs import Reference


@dataclass
class Run:
    """Everything a run holds between steps."""

    cfg: Config
    out: Path
    policy: torch.nn.Module
    tok: object
    splits: Splits
    env: EnvSpec  # every problem is an episode: its prompt, its turns, their limits
    rewards: list[RewardFunction]
    ref: Reference | None
    critic: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: object
    sampler: CurriculumSampler
    engine: RolloutEngine
    stop_ids: list[int]
    pad_id: int
    dist: Dist = field(default_factory=Dist)  # this process's place under torchrun, and its device
    precision: str = "no"  # train.mixed_precision resolved for dist.device: "bf16" or "no"
    baseline: dict = field(default_factory=dict)  # split -> greedy records before training (flips)
    warned: set = field(default_factory=set)  # reward functions whose first error was reported
    grader: Grader = field(default_factory=Grader)  # what evaluation counts as correct (rlvr.eval.grader)


@dataclass
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


@dataclass
class Collected:
    """One step's batch: the problems, their G episodes each, the final answers' texts and their scores."""

    problems: list[Problem]
    rollout: Rollout
    texts: list[str]
    scores: Scores
    metrics: dict  # about the collection itself (dynamic sampling's dropped groups and rounds)
    episodes: list[dict] = field(default_factory=list)  # each row's turns, calls and end (rlvr/envs/episodes.py)


def merge_collected(parts: list[Collected], pad_id: int) -> Collected:
    """One batch from several (groups kept by dynamic sampling, or every rank's shard)."""
    return Collected([p for c in parts for p in c.problems], concat_rollouts([c.rollout for c in parts], pad_id),
                     [t for c in parts for t in c.texts], Scores.concat([c.scores for c in parts]), {},
                     [e for c in parts for e in c.episodes])
