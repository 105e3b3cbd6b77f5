"""The training loop. It owns the order of the phases; each phase is a plain function.

    tasks -> prompts;  rollout -> G completions each;  rewards -> scores;
    algo -> advantages and loss;  train -> optimizer step;  report -> metrics, samples, summary
"""
from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlvr.config import Config, to_dict, to_yaml
from rlvr.errors import RlvrError
from rlvr.models import apply_lora, enable_gradient_checkpointing, load_model, stop_token_ids
from rlvr.report.console import before_after_table, format_samples, live_postfix, progress, say, set_quiet
from rlvr.report.health import HealthMonitor
from rlvr.report.html import write_report
from rlvr.report.trackers import open_trackers
from rlvr.report.sinks import JsonlWriter, NullWriter, atomic_write_json, atomic_write_text
from rlvr.rewards import build_rewards, score_batch
from rlvr.rewards.base import RewardFunction, Scores
from rlvr.rollout.engine import Rollout, concat_rollouts, generate, select_groups
from rlvr.rollout.hf_engine import generate as hf_generate
from rlvr.tasks import Problem, Splits, build_splits, encode_prompt
from rlvr.tasks.curriculum import CurriculumSampler, build_sampler
from rlvr.train.advantage import compute_advantages
from rlvr.train.checkpoint import (CHECKPOINTS, Progress, StopOnSignal, latest_checkpoint, load_checkpoint, restore,
                                   save_final, try_checkpoint)
from rlvr.train.distributed import (Dist, allreduce_scalars, close_distributed, gather_objects, gathered,
                                    init_distributed, reduce_metrics, sampling_seed, shard_groups, wrap_model)
from rlvr.train.evaluation import eval_on_main, flip_summary, log_eval, read_records
from rlvr.train.logprobs import Reference, completion_logprobs, reference_logprobs
from rlvr.train.metrics import sample_records, step_metrics
from rlvr.train.sft import baseline_of
from rlvr.train.update import Batch, UpdateSettings, policy_update


@dataclass
class Run:
    """Everything a run holds between steps."""

    cfg: Config
    out: Path
    policy: torch.nn.Module
    tok: object
    splits: Splits
    prompts: dict[str, list[list[int]]]  # split name -> encoded chat prompts
    rewards: list[RewardFunction]
    ref: Reference | None
    critic: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: object
    sampler: CurriculumSampler
    gen: torch.Generator
    stop_ids: list[int]
    pad_id: int
    warned: set
    engine: object = None  # rollout.engine=vllm: the VllmEngine holding a copy of the policy
    dist: Dist = field(default_factory=Dist)  # this process's place under torchrun
    baseline: dict = field(default_factory=dict)  # split -> greedy records before training (flips)


@dataclass
class Collected:
    problems: list[Problem]
    rollout: Rollout
    texts: list[str]
    scores: Scores
    metrics: dict


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def reward_functions(cfg: Config) -> list[RewardFunction]:
    weights = dict(cfg.rewards.weights)
    if cfg.algo.soft_overlong and "length" not in weights:
        weights["length"] = 1.0
    return build_rewards(weights, cfg.rollout.max_new_tokens, cfg.rewards.overlong_buffer,
                         cfg.rewards.overlong_penalty)


def check_distributed(cfg: Config, d: Dist) -> None:
    """What runs under torchrun so far; the rest is refused up front rather than silently wrong."""
    if not d.enabled:
        return
    a = cfg.algo
    unsupported = [(a.dynamic_sampling, "algo.dynamic_sampling"), (a.adv_estimator in ("reinforce_pp", "gae"),
                   f"algo.adv_estimator={a.adv_estimator}"), (a.adv_scale == "batch", "algo.adv_scale=batch"),
                   (cfg.rollout.engine == "vllm", "rollout.engine=vllm")]
    if cfg.train.parallel == "fsdp":
        unsupported += [(cfg.model.lora.r > 0, "model.lora.r > 0"), (a.micro_batch_tokens > 0,
                        "algo.micro_batch_tokens"), (cfg.train.gradient_checkpointing, "train.gradient_checkpointing"),
                        (a.beta > 0 and a.ref_sync_every > 0, "algo.ref_sync_every")]
    bad = [name for flag, name in unsupported if flag]
    if bad:
        raise RlvrError(f"not supported with {d.world} processes (train.parallel={cfg.train.parallel}) yet: "
                        f"{', '.join(bad)}; run in one process or change these settings")
    shard_groups(cfg.rollout.prompts_per_step, d.rank, d.world)  # raises unless it divides


def setup(cfg: Config, fresh: bool = True, d: Dist = Dist()) -> Run:
    """Load models, tasks and optimizer. A fresh run clears the run directory's logs (rank 0 writes)."""
    check_distributed(cfg, d)
    out = Path(cfg.train.out)
    if d.is_main:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "config.yaml", to_yaml(cfg))
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    gen = seed_everything(cfg.train.seed)  # the same on every rank: same weights, same prompt order
    gen.manual_seed(sampling_seed(cfg.train.seed, d.rank))  # ranks sample different completions
    policy, tok = load_model(cfg.model.name, cfg.model.dtype)
    if cfg.model.lora.r > 0:  # only adapters train; the reference is the base with adapters off
        policy = apply_lora(policy, cfg.model.lora)
    if cfg.train.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    splits = build_splits(cfg.task)
    for note in splits.notes:
        say(f"task: {note}")
    encode = lambda ps: [encode_prompt(tok, p.question, splits.few_shot, cfg.task.system_prompt) for p in ps]
    prompts = {"train": encode(splits.train), "heldout": encode(splits.heldout), "ood": encode(splits.ood)}
    a = cfg.algo
    ref = Reference.of(policy) if a.beta > 0 else None
    if d.enabled:  # after the reference copy, before the optimizer (FSDP replaces the parameters)
        policy = wrap_model(policy, cfg.train.parallel, d)
    critic = None
    groups = [{"params": [q for q in policy.parameters() if q.requires_grad], "lr": a.lr}]
    if a.adv_estimator == "gae":  # PPO: a value head on the policy trunk, with its own learning rate
        critic = torch.nn.Linear(policy.config.hidden_size, 1)
        torch.nn.init.zeros_(critic.weight)
        torch.nn.init.zeros_(critic.bias)
        groups.append({"params": list(critic.parameters()), "lr": a.value_lr})
    optimizer = torch.optim.AdamW(groups, weight_decay=a.weight_decay, fused=True)  # fused: 2-3x faster step
    warm = a.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    for f in ("eval_before.jsonl", "eval_after.jsonl", "metrics.jsonl", "samples.jsonl", "evals.jsonl",
              "health.jsonl") if fresh and d.is_main else ():
        (out / f).unlink(missing_ok=True)
    if fresh and d.is_main:
        shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
    engine = None
    if cfg.rollout.engine == "vllm":
        from rlvr.rollout.vllm_engine import make_engine

        engine = make_engine(cfg, policy, out)
    return Run(cfg, out, policy, tok, splits, prompts, reward_functions(cfg), ref, critic, optimizer, scheduler,
               build_sampler(cfg.curriculum, splits.train, cfg.train.seed), gen, stop_token_ids(policy, tok),
               tok.pad_token_id, set(), engine, d)


def _on_reward_error(run: Run):
    def warn(name: str, e: Exception) -> None:
        if name not in run.warned:
            run.warned.add(name)
            say(f"warning: reward function '{name}' raised {type(e).__name__}: {e}; "
                f"its completions score 0 and are counted in reward/{name}/errors")
    return warn


def group_pass_rates(run: Run, scores: Scores) -> list[float]:
    """Mean of the strict correctness reward (else the total) over each group: what the curriculum sees."""
    strict = [rf.name for rf in run.rewards if getattr(rf.fn, "checks_correctness", False)]
    values = scores.per_function[strict[0]] if strict else scores.total
    return torch.tensor(values, dtype=torch.float64).view(-1, run.cfg.rollout.group_size).mean(1).tolist()


def sample_and_score(run: Run, n_prompts: int, step: int) -> Collected:
    """Phases 1-3: draw prompts, sample G completions each, score them."""
    r, d = run.cfg.rollout, run.dist
    idx = run.sampler.next(n_prompts, step)  # the same global batch on every rank
    mine = idx[shard_groups(len(idx), d.rank, d.world)]  # this rank's whole groups
    problems = [run.splits.train[i] for i in mine]
    prompts = [run.prompts["train"][i] for i in mine]
    sampling = dict(group_size=r.group_size, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                    top_p=r.top_p, top_k=r.top_k, stop_ids=run.stop_ids, pad_id=run.pad_id)
    if run.engine is not None:  # vLLM: seeded from the sampling generator, asleep while the trainer works
        rollout = run.engine.generate(prompts, **sampling,
                                      seed=int(torch.randint(0, 2**31 - 1, (1,), generator=run.gen)))
        run.engine.sleep()
    else:
        engine = hf_generate if r.engine == "hf" else generate
        with torch.no_grad(), gathered(run.policy):
            rollout = engine(run.policy, prompts, **sampling, generator=run.gen)
    texts = run.tok.batch_decode(rollout.completion_token_lists(), skip_special_tokens=True)
    columns = {k: [p.columns()[k] for p in problems for _ in range(r.group_size)] for k in problems[0].columns()}
    columns["completion_ids"] = rollout.completion_token_lists()
    scores = score_batch(run.rewards, texts, columns, _on_reward_error(run))
    passes = [x for part in gather_objects(group_pass_rates(run, scores), d) for x in part]
    run.sampler.observe(idx, passes, step)  # every rank's sampler sees the whole batch
    return Collected(problems, rollout, texts, scores, {})


def collect(run: Run, step: int) -> Collected:
    """One step's batch; with dynamic sampling (DAPO), groups whose rewards are all equal are dropped
    and more prompts are sampled until the batch is full or algo.max_refill extra rounds pass."""
    want, g = run.cfg.rollout.prompts_per_step, run.cfg.rollout.group_size
    if not run.cfg.algo.dynamic_sampling:
        return sample_and_score(run, want, step)
    kept: list[tuple[Collected, int]] = []
    dropped = rounds = 0
    last = None
    while len(kept) < want and rounds <= run.cfg.algo.max_refill:
        last = sample_and_score(run, want, step)
        rewards = torch.tensor(last.scores.total).view(-1, g)  # [P, G]
        for i, row in enumerate(rewards):
            if bool((row != row[0]).any()):
                kept.append((last, i))
            else:
                dropped += 1
        rounds += 1
    if not kept:  # nothing informative: train on the last round (its advantages are all zero)
        kept = [(last, i) for i in range(want)]
    kept = kept[:want]
    rows = lambda i: list(range(i * g, (i + 1) * g))
    out = merge_collected([Collected([c.problems[i]], select_groups(c.rollout, [i]), [c.texts[j] for j in rows(i)],
                                     c.scores.select(rows(i)), {}) for c, i in kept], run.pad_id)
    out.metrics = {"dynamic/dropped_groups": dropped, "dynamic/rounds": rounds}
    return out


def merge_collected(parts: list[Collected], pad_id: int) -> Collected:
    """One batch from several (groups kept by dynamic sampling, or every rank's shard)."""
    return Collected([p for c in parts for p in c.problems], concat_rollouts([c.rollout for c in parts], pad_id),
                     [t for c in parts for t in c.texts], Scores.concat([c.scores for c in parts]), {})


def make_batch(run: Run, c: Collected) -> tuple[Batch, dict]:
    """Phase 4a: advantages (and value targets for PPO) for the collected batch."""
    a, r = run.cfg.algo, c.rollout
    mask = r.completion_mask * (~r.truncated).float()[:, None] if a.mask_truncated else r.completion_mask
    ref_logp = values = None
    with torch.no_grad():
        if a.kl_in == "reward" and run.ref is not None:
            ref_logp = reference_logprobs(run.ref, r.prompt_ids, r.completion_ids, r.completion_mask,
                                          r.group_size, run.pad_id, run.cfg.rollout.temperature)
        if run.critic is not None:
            out = completion_logprobs(run.policy, r.prompt_ids, r.completion_ids, r.completion_mask,
                                      r.group_size, run.pad_id, run.cfg.rollout.temperature, with_hidden=True)
            values = run.critic(out.hidden).squeeze(-1) * r.completion_mask  # [B, T]
    adv, returns, metrics = compute_advantages(a, torch.tensor(c.scores.total), r.group_size, r.completion_mask,
                                               r.sampler_logp, ref_logp, values)
    batch = Batch(r.prompt_ids, r.completion_ids, mask, adv, r.group_size, returns, values,
                  sampler_logp=r.sampler_logp)
    return batch, metrics


def train_step(run: Run, step: int, settings: UpdateSettings) -> tuple[dict, Collected]:
    """Phases 1-6 of one step; returns its metrics row."""
    t0 = time.perf_counter()
    collected = collect(run, step)                                        # 1-3. prompts, rollout, rewards
    t1 = time.perf_counter()
    batch, adv_metrics = make_batch(run, collected)                       # 4. advantages
    a = run.cfg.algo
    kl_ref = run.ref if a.kl_in == "loss" else None
    update = policy_update(run.policy, run.optimizer, batch, settings, kl_ref, run.critic, run.dist)  # 5.
    run.scheduler.step()
    if run.ref is not None and a.ref_sync_every and step % a.ref_sync_every == 0:
        run.ref.sync(run.policy, a.ref_mixup)
    if run.engine is not None:
        run.engine.sync_weights(run.policy)  # the next rollout samples from the updated policy
    t2 = time.perf_counter()
    whole, extra = collected, {**adv_metrics, **collected.metrics}        # 6. report, on the global batch
    if run.dist.enabled:
        whole = merge_collected(gather_objects(collected, run.dist), run.pad_id)
        extra = reduce_metrics(extra, run.dist, len(collected.texts))
    m = step_metrics(step, whole, update, run.rewards, t2 - t0, t1 - t0, t2 - t1)
    m.update(extra)
    m.update(run.sampler.metrics())
    m["lr"] = run.scheduler.get_last_lr()[0]
    return m, whole


def train(cfg: Config, resume: bool = False) -> dict:
    """Run the configured algorithm; write the run directory; return the summary. With `resume`,
    continue from the run directory's newest checkpoint. Under torchrun every process runs this."""
    wall_start = time.perf_counter()
    d = init_distributed()
    set_quiet(not d.is_main)  # one rank prints
    try:
        with StopOnSignal() as stop:
            return _train(cfg, resume, stop, wall_start, d)
    finally:
        close_distributed(d)


def _train(cfg: Config, resume: bool, stop: StopOnSignal, wall_start: float, d: Dist) -> dict:
    last = latest_checkpoint(cfg.train.out) if resume else None
    if resume and last is None:
        say(f"{Path(cfg.train.out) / CHECKPOINTS}: no checkpoint yet; starting the run from step 0")
        resume = False
    run = setup(cfg, fresh=not resume, d=d)
    p = Progress()
    sft = baseline_of(cfg.model.name)
    if sft is not None:  # started from an SFT model: its accuracy is the baseline
        p.summary["sft"] = sft
    if resume:
        p = restore(run, load_checkpoint(last))
        run.baseline = read_records(run.out / "eval_before.jsonl")
        say(f"resuming {run.out} from step {p.step} ({last.name})")
    sink = (lambda name: JsonlWriter(run.out / name)) if d.is_main else (lambda name: NullWriter())
    evals, health = sink("evals.jsonl"), sink("health.jsonl")
    monitor = HealthMonitor()
    monitor.fired = p.fired
    trackers = open_trackers(cfg.log.trackers, run.out, cfg.log.project, to_dict(cfg)) if d.is_main else []
    stopping = lambda: bool(allreduce_scalars({"s": float(stop.signal is not None)}, d, "max")["s"])
    if cfg.eval.before and not resume:
        before, run.baseline = eval_on_main(run, "before")
        p.summary.update(before)
        p.eval_rows.append(log_eval(run, evals, 0, before, "before", 0.0))
    started = time.perf_counter() - p.train_seconds  # training clock from here, carried over a resume
    clock = lambda: time.perf_counter() - started
    metrics_sink, samples_sink = sink("metrics.jsonl"), sink("samples.jsonl")
    settings = UpdateSettings.of(cfg, run.pad_id)
    bar = progress(cfg.train.steps, initial=p.step, disable=not d.is_main)
    run.policy.train()
    stopped = False
    for step in range(p.step + 1, cfg.train.steps + 1):
        if stopping():  # arrived before this step began
            stopped = True
            try_checkpoint(run, p, clock())
            break
        m, collected = train_step(run, step, settings)
        metrics_sink.write(m)
        for t in trackers:
            t.log(step, m)
        p.history.append(m)
        monitor.report(p.history, p.eval_rows, health)
        records = sample_records(step, collected, run.rewards)
        for rec in records:
            samples_sink.write(rec)
        if cfg.train.samples_every and step % cfg.train.samples_every == 0:
            say(format_samples(step, records, cfg.rollout.group_size))
        if cfg.train.eval_every and step % cfg.train.eval_every == 0 and step != cfg.train.steps:
            te = time.perf_counter()
            p.eval_rows.append(log_eval(run, evals, step, eval_on_main(run, "mid", ("heldout",))[0], "mid",
                                        clock() - p.eval_seconds))
            monitor.report(p.history, p.eval_rows, health)  # the skill rules read this evaluation
            for t in trackers:
                t.log(step, {f"eval/{k}": v for k, v in p.eval_rows[-1].items() if k.endswith(("accuracy", "lenient"))})
            p.eval_seconds += time.perf_counter() - te
            run.policy.train()
        bar.set_postfix(live_postfix(m, p.eval_rows))
        bar.update(1)
        p.step = p.summary["steps"] = step
        every = cfg.train.save_every
        stopped = stopping()
        if stopped or step == cfg.train.steps or (every and step % every == 0):
            try_checkpoint(run, p, clock())
        if stopped:
            break
    bar.close()
    metrics_sink.close()
    samples_sink.close()
    summary = p.summary
    summary["train_seconds"] = clock() - p.eval_seconds
    if stopped:
        summary["interrupted"] = stop.signal or "a signal to another process"
        say(f"stopped at step {p.step} by {summary['interrupted']}; continue with: rlvr train --resume {run.out}")
    elif cfg.eval.after:
        after, records = eval_on_main(run, "after")
        summary.update(after)
        if run.baseline:
            summary.update(flip_summary(run.baseline, records))
        p.eval_rows.append(log_eval(run, evals, summary["steps"], after, "after", clock() - p.eval_seconds))
        if p.history:
            monitor.report(p.history, p.eval_rows, health, "at the end")
    evals.close()
    health.close()
    for t in trackers:
        t.close()
    if not stopped:
        save_final(run)
    summary["wall_seconds"] = time.perf_counter() - wall_start
    if d.is_main:
        atomic_write_json(run.out / "summary.json", summary)
        say(before_after_table(summary))
        say(f"report: {write_report(run.out)}")
    return summary
