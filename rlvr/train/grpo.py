"""The GRPO loop. It owns the order of the phases; each phase is a plain function.

    tasks -> prompts;  rollout -> G completions each;  rewards -> scores;
    algo -> group advantages and loss;  train -> optimizer step;  report -> metrics, samples, summary
"""
from __future__ import annotations

import copy
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from rlvr.algo import group_advantages
from rlvr.config import Config, to_yaml
from rlvr.eval import evaluate
from rlvr.models import load_model, stop_token_ids
from rlvr.report.console import before_after_table, format_samples, progress, say
from rlvr.report.sinks import JsonlWriter, atomic_save_model, atomic_write_json, atomic_write_text
from rlvr.rewards import build_rewards, score_batch
from rlvr.rollout.engine import generate
from rlvr.tasks import PromptSampler, build_splits, encode_prompt
from rlvr.train.update import Batch, UpdateSettings, policy_update


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def warmup_schedule(optimizer, warmup_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0)


def update_settings(cfg: Config, pad_id: int) -> UpdateSettings:
    a = cfg.algo
    return UpdateSettings(clip_low=a.clip_low, clip_high=a.clip_high, iterations=a.iterations, beta=a.beta,
                          aggregation=a.aggregation, micro_batch_prompts=a.micro_batch_prompts,
                          max_grad_norm=a.max_grad_norm, temperature=cfg.rollout.temperature, pad_id=pad_id)


def step_metrics(step, scores, rollout, update, rewards, t_step, t_roll, t_train) -> dict:
    lengths = rollout.completion_mask.sum(-1)  # [B]
    rows = torch.tensor(scores.total).view(-1, rollout.group_size)  # [P, G]
    m = {"step": step, "reward/mean": float(rows.mean()), "reward/std": float(rows.std()),
         "frac_zero_std_groups": float((rows.std(dim=1) == 0).float().mean())}
    for rf in rewards:
        m[f"reward/{rf.name}/mean"] = statistics.fmean(scores.per_function[rf.name])
        m[f"reward/{rf.name}/errors"] = scores.errors[rf.name]
    m.update({"completion/length_mean": float(lengths.mean()),
              "completion/truncated_frac": float(rollout.truncated.float().mean()),
              "tokens/generated": int(lengths.sum())})
    m.update(update)
    m.update({"time/step_s": t_step, "time/rollout_s": t_roll, "time/train_s": t_train})
    return m


def sample_records(step, problems, texts, scores, rewards, group_size) -> list[dict]:
    return [{"step": step, "prompt": problems[i // group_size].question,
             "answer": problems[i // group_size].answer, "completion": text,
             "reward": scores.total[i],
             "rewards": {rf.name: {"score": scores.per_function[rf.name][i],
                                   "reason": scores.reasons[rf.name][i]} for rf in rewards}}
            for i, text in enumerate(texts)]


def train(cfg: Config) -> dict:
    """Run GRPO as configured; write the run directory; return the summary."""
    wall_start = time.perf_counter()
    out = Path(cfg.train.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", to_yaml(cfg))
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    gen = seed_everything(cfg.train.seed)

    # Model, task, rewards.
    policy, tok = load_model(cfg.model.name, cfg.model.dtype)
    stop_ids, pad_id = stop_token_ids(policy, tok), tok.pad_token_id
    splits = build_splits(cfg.task)
    encode = lambda ps: [encode_prompt(tok, p.question, splits.few_shot, cfg.task.system_prompt) for p in ps]
    train_prompts, heldout_prompts, ood_prompts = encode(splits.train), encode(splits.heldout), encode(splits.ood)
    rewards = build_rewards(cfg.rewards.weights, cfg.rollout.max_new_tokens, cfg.rewards.overlong_buffer,
                            cfg.rewards.overlong_penalty)
    warned: set[str] = set()

    def on_reward_error(name: str, e: Exception) -> None:
        if name not in warned:
            warned.add(name)
            say(f"warning: reward function '{name}' raised {type(e).__name__}: {e}; "
                "its completions score 0 and are counted in reward/{name}/errors")

    ref = copy.deepcopy(policy).eval().requires_grad_(False) if cfg.algo.beta > 0 else None
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay)
    scheduler = warmup_schedule(optimizer, cfg.algo.warmup_steps)
    settings = update_settings(cfg, pad_id)

    def run_eval(tag: str) -> dict:
        result = {}
        for split, problems, prompts in (("heldout", splits.heldout, heldout_prompts),
                                         ("ood", splits.ood, ood_prompts)):
            r = evaluate(policy, tok, problems, prompts, max_new_tokens=cfg.eval.max_new_tokens,
                         batch_size=cfg.eval.batch_size, stop_ids=stop_ids)
            result[f"{split}_accuracy_{tag}"], result[f"{split}_format_{tag}"] = r.accuracy, r.format_rate
            with JsonlWriter(out / f"eval_{tag}.jsonl") as sink:
                for rec in r.records:
                    sink.write({"split": split, **rec})
        say(f"eval {tag}: held-out {100 * result[f'heldout_accuracy_{tag}']:.1f}%, "
            f"OOD {100 * result[f'ood_accuracy_{tag}']:.1f}%")
        return result

    summary: dict = {"steps": 0}
    for f in ("eval_before.jsonl", "eval_after.jsonl", "metrics.jsonl", "samples.jsonl"):
        (out / f).unlink(missing_ok=True)
    if cfg.eval.before:
        summary.update(run_eval("before"))

    sampler = PromptSampler(len(splits.train), cfg.train.seed)
    metrics_sink, samples_sink = JsonlWriter(out / "metrics.jsonl"), JsonlWriter(out / "samples.jsonl")
    bar = progress(cfg.train.steps)
    train_start = time.perf_counter()
    policy.train()
    for step in range(1, cfg.train.steps + 1):
        t0 = time.perf_counter()
        # 1. prompts
        idx = sampler.next(cfg.rollout.prompts_per_step)
        problems = [splits.train[i] for i in idx]
        prompts = [train_prompts[i] for i in idx]
        # 2. rollout: G completions per prompt
        r = cfg.rollout
        with torch.no_grad():
            rollout = generate(policy, prompts, group_size=r.group_size, max_new_tokens=r.max_new_tokens,
                               temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                               stop_ids=stop_ids, pad_id=pad_id, generator=gen)
        texts = tok.batch_decode(rollout.completion_token_lists(), skip_special_tokens=True)
        # 3. rewards
        columns = {k: [p.columns()[k] for p in problems for _ in range(r.group_size)]
                   for k in problems[0].columns()}
        columns["completion_ids"] = rollout.completion_token_lists()
        scores = score_batch(rewards, texts, columns, on_reward_error)
        t1 = time.perf_counter()
        # 4. advantages and policy update
        adv = group_advantages(torch.tensor(scores.total).view(-1, r.group_size), "group", cfg.algo.adv_eps)
        batch = Batch(prompts, rollout.completion_ids, rollout.completion_mask, adv.flatten(), r.group_size)
        update = policy_update(policy, optimizer, batch, settings, ref)
        scheduler.step()
        t2 = time.perf_counter()
        # 5. report
        m = step_metrics(step, scores, rollout, update, rewards, t2 - t0, t1 - t0, t2 - t1)
        m["lr"] = scheduler.get_last_lr()[0]
        metrics_sink.write(m)
        records = sample_records(step, problems, texts, scores, rewards, r.group_size)
        for rec in records:
            samples_sink.write(rec)
        if cfg.train.samples_every and step % cfg.train.samples_every == 0:
            say(format_samples(step, records, r.group_size))
        bar.set_postfix(reward=f"{m['reward/mean']:.3f}", len=f"{m['completion/length_mean']:.1f}")
        bar.update(1)
        summary["steps"] = step
    bar.close()
    metrics_sink.close()
    samples_sink.close()
    summary["train_seconds"] = time.perf_counter() - train_start

    if cfg.eval.after:
        summary.update(run_eval("after"))
    atomic_save_model(policy, tok, out / "final")
    summary["wall_seconds"] = time.perf_counter() - wall_start
    atomic_write_json(out / "summary.json", summary)
    say(before_after_table(summary))
    return summary
