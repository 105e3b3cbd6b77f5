"""Building a `Run` from a config: each phase's settings (rlvr/train/settings.py), models, tasks, rewards,
optimizer, prompt sampler, rollout engine."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from rlvr.config import Config, to_dict, to_yaml
from rlvr.device import resolve_precision
from rlvr.errors import RlvrError
from rlvr.models.checkpointing import enable_gradient_checkpointing
from rlvr.models.loading import check_model_name, load_model, stop_token_ids
from rlvr.models.lora import apply_lora
from rlvr.plan import first_lines
from rlvr.report.console import say
from rlvr.report.trackers import check_trackers, open_trackers
from rlvr.rewards import rewards_of
from rlvr.eval.grader import Grader, choose_grader
from rlvr.rewards.base import RewardFunction, strict_rewards
from rlvr.rewards.preflight import check_gold_answers, check_rewards
from rlvr.rollout.engines import make_engine
from rlvr.envs.episodes import make_spec
from rlvr.envs.preflight import check_environment
from rlvr.tasks import build_splits
from rlvr.tasks.readers import save_rows
from rlvr.tasks.curriculum import build_sampler
from rlvr.train.rundir import prepare_run_dir
from rlvr.train.distributed import Dist, shard_groups, wrap_model
from rlvr.train.forward import Reference, reference_in_bf16
from rlvr.train.optim import adamw, warmup_scheduler
from rlvr.train.packed import check_packing
from rlvr.train.settings import LogSettings, Settings, engine_settings
from rlvr.train.state import Data, Models, Run

def seed_everything(seed: int) -> None:
    """The global generators (weight init of a critic, anything a reward function draws); rollouts
    draw from per-group seeds instead (rlvr.rollout.sampling.group_seed)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_distributed(cfg: Config, d: Dist) -> None:
    """What runs under torchrun so far; the rest is refused up front rather than silently wrong."""
    if not d.enabled:
        return
    a = cfg.algo
    unsupported = [(a.dynamic_sampling, "algo.dynamic_sampling"), (a.adv_estimator in ("reinforce_pp", "gae"),
                   f"algo.adv_estimator={a.adv_estimator}"), (a.adv_scale == "batch", "algo.adv_scale=batch"),
                   (cfg.rollout.engine == "vllm" and not cfg.rollout.vllm.server_url,
                    "rollout.engine=vllm colocated (rollout.vllm.server_url samples from vLLM servers under torchrun)"),
                   (cfg.rollout.overlap != "none", f"rollout.overlap={cfg.rollout.overlap}")]
    if cfg.train.parallel == "fsdp":
        unsupported += [(cfg.model.lora.r > 0, "model.lora.r > 0"), (cfg.optimizer.micro_batch_tokens > 0,
                        "optimizer.micro_batch_tokens"), (cfg.train.gradient_checkpointing, "train.gradient_checkpointing"),
                        (a.beta > 0 and a.ref_sync_every > 0, "algo.ref_sync_every")]
    bad = [name for flag, name in unsupported if flag]
    if bad:
        raise RlvrError(f"not supported with {d.world} processes (train.parallel={cfg.train.parallel}) yet: "
                        f"{', '.join(bad)}; run in one process or change these settings")
    shard_groups(cfg.rollout.prompts_per_step, d.rank, d.world)  # raises unless it divides


def _optimizer(cfg: Config, policy: torch.nn.Module) -> tuple[torch.optim.Optimizer, object, torch.nn.Module | None]:
    """AdamW over the trainable policy weights (and PPO's value head, at its own learning rate), its
    linear warm-up schedule, and the value head (None unless algo.adv_estimator is gae)."""
    a, o = cfg.algo, cfg.optimizer
    critic = None
    groups = [{"params": [q for q in policy.parameters() if q.requires_grad], "lr": o.lr}]
    if a.adv_estimator == "gae":  # PPO: a value head on the policy trunk
        critic = torch.nn.Linear(policy.config.hidden_size, 1, device=next(policy.parameters()).device)
        torch.nn.init.zeros_(critic.weight)
        torch.nn.init.zeros_(critic.bias)
        groups.append({"params": list(critic.parameters()), "lr": a.value_lr})
    optimizer = adamw(groups, o.weight_decay, o.state)
    return optimizer, warmup_scheduler(optimizer, o.warmup_steps), critic


def data_and_rewards(cfg: Config, given: dict | None = None) -> tuple[object, list[RewardFunction], Grader]:
    """The task's splits, the rewards (the same set rlvr audit attacks; `given`: Python ones by name,
    rlvr.fit), each reward tried on the first rows (rlvr.rewards.preflight), and the evaluation's grader,
    said on the console. Data first: a bad file is named in seconds, before the model loads."""
    splits = build_splits(cfg.task)
    for note in splits.notes:
        say(f"task: {note}")
    rewards = rewards_of(cfg.rewards, cfg.rollout.max_new_tokens, given)
    for warning in check_gold_answers(rewards, splits, cfg.task.columns):
        say(f"task: {warning}")
    grader = choose_grader(rewards, cfg.eval.grader, cfg.eval.grader_threshold)
    strict = tuple(rf.name for rf in strict_rewards(rewards)) + ((grader.name,) if grader.user else ())
    for warning in check_rewards(rewards, splits.train or splits.heldout, strict, cfg.env.name != "single"):
        say(f"warning: {warning}")
    say(grader.line())
    return splits, rewards, grader


def within_context(splits, env, tok, context: int | None, budgets: dict[str, int]) -> None:
    """Leave out the problems whose prompt and answer budget do not fit the model's context, with a count
    and the first one named (each split with its own budget: rollout.max_new_tokens, eval.max_new_tokens).
    Left out rather than cut: a prompt cut to fit is another question (its end, or the instructions at
    its start, gone) that the gold answer no longer grades, while positions past the context make a
    model's output garbage or fail. A split left with none is an error."""
    if not context:
        return
    for split, budget in budgets.items():
        problems = getattr(splits, split)
        if not problems:
            continue
        # A token is at least one byte of text, and a single-turn prompt is its problem's text inside the
        # same frame (template, system prompt, few-shot turns): the first prompt's bytes bound the frame,
        # so a problem whose text plus that bound fits is known to fit without rendering it.
        frame = None if env.multi_turn else len(tok.decode(env.prompt(problems[0])).encode())

        def tokens(p) -> int:  # the prompt's length, or 0 where it is known to fit
            if frame is not None and frame + _text_bytes(p) + budget <= context:
                return 0
            return len(env.prompt(p))

        lengths = [tokens(p) for p in problems]
        fits = [p for p, n in zip(problems, lengths) if n + budget <= context]
        if len(fits) == len(problems):
            continue
        n, first = next((n, p) for p, n in zip(problems, lengths) if n + budget > context)
        where = first.origin or repr(first.question[:60])
        line = (f"{len(problems) - len(fits)} of {len(problems)} {split} problems do not fit the model's context of "
                f"{context} tokens with {budget} new tokens: the first, {where}, has a {n}-token prompt")
        if not fits:  # an environment's tool schemas and worked example are in the prompt too
            parts = "task.few_shot, task.system_prompt" + (", env.example, env.tools" if env.multi_turn else "")
            raise RlvrError(f"task: {line}; shorten the prompts ({parts}) or the new-token budget, or use a model "
                            "with a longer context")
        say(f"task: {line}; left out")
        setattr(splits, split, fits)


def _text_bytes(p) -> int:
    return len(p.question.encode()) + sum(len(str(m.get("content", "")).encode()) for m in p.messages)


def claim_run_dir(cfg: Config, fresh: bool, log: LogSettings) -> list:
    """The run directory made this run's (rank 0): the trackers started first (one that cannot start, a
    wandb with no API key, is refused with the directory as it was), then config.yaml written (a fresh run
    first clears an earlier run's records) and rows given in memory (rlvr.fit) saved as the files config.yaml
    names. Returns the trackers."""
    out = Path(cfg.train.out)
    trackers = open_trackers(list(log.trackers), out, log.project, to_dict(cfg))  # the run's record: every key
    prepare_run_dir(out, to_yaml(cfg), fresh)
    save_rows(out)
    return trackers


def setup(cfg: Config, fresh: bool = True, d: Dist = Dist(), given: dict | None = None) -> Run:
    """Load tasks, rewards, models, environment, optimizer and rollout engine, then, for a fresh run,
    set up the run directory (rank 0 writes): a start that fails on the way leaves an earlier run's
    directory untouched. A resumed run's directory is claimed only once its checkpoint has loaded too
    (rlvr.train.grpo.start). `given`: Python reward functions by name (rlvr.fit)."""
    check_distributed(cfg, d)
    out = Path(cfg.train.out)
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    seed_everything(cfg.train.seed)  # the same on every rank: same weights, same prompt order
    check_model_name(cfg.model.name)  # a missing model is said before the data's columns are read
    splits, rewards, grader = data_and_rewards(cfg, given)  # a reward that cannot run stops here, in seconds
    check_trackers(cfg.log.trackers)
    if d.is_main:  # before the weights load: a run that cannot fit is told so first
        card = torch.cuda.get_device_properties(d.device).total_memory if d.device.type == "cuda" else None
        say(first_lines(cfg, d.device.type, [p.question for p in splits.train], card))
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, d.device, cfg.model.quantize)
    precision = resolve_precision(cfg.train.mixed_precision, d.device)
    models = models_of(cfg, policy, tok, d, precision)
    context = getattr(policy.config, "max_position_embeddings", None)
    env = make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt, context)
    for warning in check_environment(env, splits.train or splits.heldout, cfg.env.name):  # one that cannot run stops here
        say(f"warning: {warning}")
    within_context(splits, env, tok, context,
                   {"train": cfg.rollout.max_new_tokens, "heldout": cfg.eval.max_new_tokens, "ood": cfg.eval.max_new_tokens})
    sampler = build_sampler(cfg.curriculum, splits.train, cfg.train.seed)
    engine = make_engine(engine_settings(cfg), models.policy, out, precision)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision=precision)
    trackers = []
    if d.is_main and fresh:  # everything has loaded: only now is an earlier run's directory replaced
        trackers = claim_run_dir(cfg, fresh, settings.log)
    data = Data(splits=splits, env=env, rewards=rewards, grader=grader, sampler=sampler)
    return Run(settings=settings, models=models, data=data, engine=engine, out=out, dist=d, trackers=trackers)


def models_of(cfg: Config, policy: torch.nn.Module, tok, d: Dist, precision: str) -> Models:
    """The loaded policy made what cfg trains (LoRA adapters, gradient checkpointing, wrapped for torchrun),
    its KL reference, PPO's value head, AdamW and the warm-up schedule."""
    if cfg.model.lora.r > 0:  # only adapters train; the reference is the base with adapters off
        policy = apply_lora(policy, cfg.model.lora)
    if cfg.train.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    if cfg.train.packed:  # refused here, before anything trains, where the attention would mix the rows
        check_packing(policy)
    # a copy on the policy's device, in bf16 where autocast makes that exact
    ref = Reference.of(policy, reference_in_bf16(cfg.algo, precision)) if cfg.algo.beta > 0 else None
    if d.enabled:  # after the reference copy, before the optimizer (FSDP replaces the parameters)
        policy = wrap_model(policy, cfg.train.parallel, d)
    optimizer, scheduler, critic = _optimizer(cfg, policy)
    return Models(policy=policy, tok=tok, ref=ref, critic=critic, optimizer=optimizer, scheduler=scheduler)
