"""The training loop. It owns the order of the phases; each phase is a plain function.

    tasks -> prompts;  rollout -> G completions each;  rewards -> scores;
    algo -> advantages and loss;  train -> optimizer step;  report -> metrics, samples, summary

`train` -> `_train`: start (setup or resume), evaluate before, then per step `train_step` (collect,
make_batch, policy_update), `log_step`, `evaluate_mid` and `try_checkpoint` when due; then `finish`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from rlvr.config import Config, to_dict
from rlvr.config.paths import anchored
from rlvr.device import peak_memory_gib, reset_peak_memory, sampling_autocast
from rlvr.report.console import before_after_table, format_samples, live_postfix, progress, say, set_quiet
from rlvr.report.health import HealthMonitor
from rlvr.report.html import write_report
from rlvr.report.sinks import JsonlWriter, NullWriter, atomic_write_json
from rlvr.report.trackers import open_trackers
from rlvr.rewards import score_batch, strict_rewards
from rlvr.rewards.base import Scores
from rlvr.rewards.call import TrainerState
from rlvr.envs.episodes import reward_inputs, run_episodes
from rlvr.rollout.decoding import select_groups
from rlvr.rollout.sampling import group_seed
from rlvr.train.batch import make_batch
from rlvr.train.checkpoint import (CHECKPOINTS, StopOnSignal, check_run_dir, latest_checkpoint, load_checkpoint,
                                   restore, save_final, try_checkpoint)
from rlvr.train.distributed import (Dist, allreduce_scalars, close_distributed, gather_objects, gathered,
                                    init_distributed, reduce_metrics, shard_groups)
from rlvr.train.evaluation import eval_on_main, flip_summary, log_eval, read_records
from rlvr.train.metrics import sample_records, step_metrics
from rlvr.train.overlap import Rollouts
from rlvr.train.assemble import setup
from rlvr.train.sft import baseline_of
from rlvr.train.state import Collected, Progress, Run, merge_collected
from rlvr.train.update import EntropyState, UpdateSettings, policy_update


# ---------------------------------------------------------------- one step: collect, advantages, update

def _on_reward_error(run: Run):
    def warn(name: str, e: Exception) -> None:
        if name not in run.warned:
            run.warned.add(name)
            say(f"warning: reward function '{name}' raised {type(e).__name__}: {e}; "
                f"its completions score 0 and are counted in reward/{name}/errors")
    return warn


def group_pass_rates(run: Run, scores: Scores) -> list[float]:
    """Mean of the strict correctness reward (else the total) over each group: what the curriculum sees."""
    strict = strict_rewards(run.rewards)
    values = scores.per_function[strict[0].name] if strict else scores.total
    return torch.tensor(values, dtype=torch.float64).view(-1, run.cfg.rollout.group_size).mean(1).tolist()


def sample_and_score(run: Run, n_prompts: int, step: int, round_: int = 0) -> Collected:
    """Phases 1-3: draw prompts, sample G completions each, score them. Group i of the global batch
    samples from group_seed(train.seed, step, round * n_prompts + i), whichever rank holds it."""
    r, d = run.cfg.rollout, run.dist
    idx = run.sampler.next(n_prompts, step)  # the same global batch on every rank
    mine = shard_groups(len(idx), d.rank, d.world)  # this rank's whole groups
    problems = [run.splits.train[i] for i in idx[mine]]
    seeds = [group_seed(run.cfg.train.seed, step, round_ * n_prompts + i) for i in range(mine.start, mine.stop)]
    with gathered(run.policy), sampling_autocast(run.dist.device, run.precision):  # FSDP: this rank holds the full weights while it samples
        ep = run_episodes(run.engine, run.env, problems, group_size=r.group_size, seeds=seeds,
                          max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                          stop_ids=run.stop_ids, pad_id=run.pad_id)
    run.engine.sleep()
    rollout, texts = ep.rollout, ep.texts  # texts: each episode's final answer
    completions, columns = reward_inputs(problems, ep, r.group_size)  # as TRL passes them
    origins = [p.origin or repr(p.question[:80]) for p in problems for _ in range(r.group_size)]
    t0 = time.perf_counter()
    scores = score_batch(run.rewards, completions, columns, _on_reward_error(run),  # code: across the sandbox pool
                         shared={"trainer_state": TrainerState(step - 1, run.cfg.train.steps)}, origins=origins,
                         stop_if_all_fail=True)
    reward_s = time.perf_counter() - t0
    passes = [x for part in gather_objects(group_pass_rates(run, scores), d) for x in part]
    run.sampler.observe(idx, passes, step)  # every rank's sampler sees the whole batch
    episodes = ep.records if run.env.multi_turn else []  # single-turn tasks log what they always logged
    return Collected(problems, rollout, texts, scores, {"time/reward_s": reward_s, **logged_metrics(scores)}, episodes)


def memory_metrics(rollout: float | None, update: float | None) -> dict[str, float]:
    """Peak memory of the step's phases in GiB (rlvr.device.peak_memory_gib: CUDA tensors on a GPU, the
    process's resident set on the CPU): rollout (sampling and scoring), update (advantages, the policy
    update, the rollout weights' refresh) and the whole step; absent where it cannot be read."""
    if rollout is None or update is None:
        return {}
    return {"memory/rollout_peak_gib": rollout, "memory/update_peak_gib": update,
            "memory/step_peak_gib": max(rollout, update)}


def logged_metrics(scores: Scores) -> dict[str, float]:
    """What reward functions reported through TRL's log_metric, averaged over the step's calls."""
    return {f"reward/logged/{name}": value for name, value in scores.logged.items()}


def collect(run: Run, step: int) -> Collected:
    """One step's batch; with dynamic sampling (DAPO), groups whose rewards are all equal are dropped
    and more prompts are sampled until the batch is full or algo.max_refill extra rounds pass."""
    want, g = run.cfg.rollout.prompts_per_step, run.cfg.rollout.group_size
    if not run.cfg.algo.dynamic_sampling:
        return sample_and_score(run, want, step)
    kept: list[tuple[Collected, int]] = []
    dropped = rounds = 0
    last, reward_s = None, 0.0
    while len(kept) < want and rounds <= run.cfg.algo.max_refill:
        last = sample_and_score(run, want, step, rounds)
        reward_s += last.metrics["time/reward_s"]
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
                                     c.scores.select(rows(i)), {}, [c.episodes[j] for j in rows(i) if c.episodes]) for c, i in kept],
                          run.pad_id)
    out.metrics = {"dynamic/dropped_groups": dropped, "dynamic/rounds": rounds, "time/reward_s": reward_s,
                   **logged_metrics(out.scores)}
    return out


def train_step(run: Run, step: int, settings: UpdateSettings, rollouts: Rollouts,
               entropy: EntropyState | None = None) -> tuple[dict, Collected]:
    """Phases 1-6 of one step; returns its metrics row and the global batch. entropy: the adaptive entropy
    controller's state (None: its start)."""
    device = run.dist.device
    reset_peak_memory(device)
    t0 = time.perf_counter()
    collected = rollouts.take(step, run.cfg.train.steps)                  # 1-3. prompts, rollout, rewards
    t1 = time.perf_counter()
    rollout_peak = peak_memory_gib(device)
    reset_peak_memory(device)
    batch, adv_metrics = make_batch(run, collected)                       # 4. advantages
    a = run.cfg.algo
    kl_ref = run.ref if settings.loss_beta > 0 else None
    update = policy_update(run.policy, run.optimizer, batch, settings, kl_ref, run.critic, run.dist, entropy)  # 5.
    run.scheduler.step()
    if run.ref is not None and a.ref_sync_every and step % a.ref_sync_every == 0:
        run.ref.sync(run.policy, a.ref_mixup)
    rollouts.updated()  # on-policy: the next rollout samples from the updated policy
    t2 = time.perf_counter()
    whole, extra = collected, {**adv_metrics, **collected.metrics,       # 6. report, on the global batch
                               **memory_metrics(rollout_peak, peak_memory_gib(device))}
    if run.dist.enabled:
        whole = merge_collected(gather_objects(collected, run.dist), run.pad_id)
        extra = reduce_metrics(extra, run.dist, len(collected.texts))
    m = step_metrics(step, whole, update, run.rewards, t2 - t0, t1 - t0, t2 - t1)
    m.update(extra)
    m.update(run.sampler.metrics())
    m["time/reward_share"] = m["time/reward_s"] / max(m["time/step_s"], 1e-9)  # of the step, in scoring
    m["lr"] = run.scheduler.get_last_lr()[0]
    return m, whole


# ---------------------------------------------------------------- the run: start, log, evaluate, checkpoint, finish

@dataclass
class Outputs:
    """Where a run's records go: JSONL files on rank 0 (null writers elsewhere), trackers, health rules."""

    metrics: object
    samples: object
    evals: object
    health: object
    trackers: list = field(default_factory=list)
    monitor: HealthMonitor = field(default_factory=HealthMonitor)

    @staticmethod
    def open(run: Run, p: Progress) -> Outputs:
        main = run.dist.is_main
        sink = (lambda name: JsonlWriter(run.out / name)) if main else (lambda name: NullWriter())
        trackers = open_trackers(run.cfg.log.trackers, run.out, run.cfg.log.project, to_dict(run.cfg)) if main else []
        out = Outputs(sink("metrics.jsonl"), sink("samples.jsonl"), sink("evals.jsonl"), sink("health.jsonl"), trackers)
        out.monitor.fired = p.fired
        return out

    def close(self) -> None:
        for w in (self.metrics, self.samples, self.evals, self.health, *self.trackers):
            w.close()


def start(cfg: Config, resume: bool, d: Dist, given: dict | None = None) -> tuple[Run, Progress, bool, dict | None]:
    """A fresh run, or the run directory's newest checkpoint restored; returns (run, progress, resumed,
    the batch collected for the next step when the checkpoint was written: rollout.overlap)."""
    last = latest_checkpoint(cfg.train.out) if resume else None
    if resume and last is None:
        say(f"{Path(cfg.train.out) / CHECKPOINTS}: no checkpoint yet; starting the run from step 0")
    run = setup(cfg, fresh=last is None, d=d, given=given)
    p = Progress()
    sft = baseline_of(cfg.model.name)
    if sft is not None:  # started from an SFT model: its accuracy is the baseline
        p.summary["sft"] = sft
    pending = None
    if last is not None:
        state = load_checkpoint(last)
        p, pending = restore(run, state), state.get("pending")
        run.engine.sync_weights(run.policy)  # an engine with its own weights (vLLM) got them before the restore
        run.baseline = read_records(run.out / "eval_before.jsonl")
        say(f"resuming {run.out} from step {p.step} ({last.name})")
    p.summary["grader"] = run.grader.name  # what the accuracies in the summary count as correct
    return run, p, last is not None, pending


def log_step(run: Run, p: Progress, out: Outputs, step: int, m: dict, collected: Collected) -> None:
    """The step's metrics row to metrics.jsonl, trackers and health rules; its samples to samples.jsonl."""
    out.metrics.write(m)
    for t in out.trackers:
        t.log(step, m)
    p.history.append(m)
    out.monitor.report(p.history, p.eval_rows, out.health)
    records = sample_records(step, collected, run.rewards)
    for rec in records:
        out.samples.write(rec)
    if run.cfg.train.samples_every and step % run.cfg.train.samples_every == 0:
        say(format_samples(step, records, run.cfg.rollout.group_size))


def evaluate_mid(run: Run, p: Progress, out: Outputs, step: int, clock: Callable[[], float]) -> None:
    """Held-out greedy evaluation during the run (train.eval_every), then the skill health rules."""
    t0 = time.perf_counter()
    result, _ = eval_on_main(run, "mid", ("heldout",))
    p.eval_rows.append(log_eval(run, out.evals, step, result, "mid", clock() - p.eval_seconds))
    out.monitor.report(p.history, p.eval_rows, out.health)  # the skill rules read this evaluation
    for t in out.trackers:
        t.log(step, {f"eval/{k}": v for k, v in p.eval_rows[-1].items() if k.endswith(("accuracy", "lenient"))})
    p.eval_seconds += time.perf_counter() - t0
    run.policy.train()


def finish(run: Run, p: Progress, out: Outputs, interrupted: str | None, train_seconds: float) -> dict:
    """The final evaluation (unless interrupted), flips, health, final model, summary.json, report.html."""
    summary = p.summary
    summary["train_seconds"] = train_seconds - p.eval_seconds
    if interrupted:
        summary["interrupted"] = interrupted
        say(f"stopped at step {p.step} by {interrupted}; continue with: rlvr train --resume {run.out}")
    elif run.cfg.eval.after:
        after, records = eval_on_main(run, "after")
        summary.update(after)
        if run.baseline:
            summary.update(flip_summary(run.baseline, records))
        p.eval_rows.append(log_eval(run, out.evals, summary["steps"], after, "after", train_seconds - p.eval_seconds))
        if p.history:
            out.monitor.report(p.history, p.eval_rows, out.health, "at the end")
    out.close()
    if not interrupted:
        save_final(run)
    return summary


def train(cfg: Config, resume: bool = False, given: dict[str, Callable] | None = None) -> dict:
    """Run the configured algorithm; write the run directory; return the summary. With `resume`,
    continue from the run directory's newest checkpoint. A fresh run refuses a run directory that holds
    anything unless train.overwrite (nothing in it is touched before the run has loaded). `given`: Python
    reward functions by their rewards.weights name (rlvr.fit). Under torchrun every process runs this."""
    wall_start = time.perf_counter()
    cfg = anchored(cfg)  # config.yaml resumes from any working directory
    if not resume:
        check_run_dir(cfg.train.out, cfg.train.overwrite)
    d = init_distributed(cfg.train.device)
    set_quiet(not d.is_main)  # one rank prints
    try:
        with StopOnSignal() as stop:
            summary = _train(cfg, resume, stop, d, given)
    finally:
        close_distributed(d)
    summary["wall_seconds"] = time.perf_counter() - wall_start
    if d.is_main:
        atomic_write_json(Path(cfg.train.out) / "summary.json", summary)
        say(before_after_table(summary))
        say(f"report: {write_report(cfg.train.out)}")
    return summary


def _train(cfg: Config, resume: bool, stop: StopOnSignal, d: Dist, given: dict | None) -> dict:
    run, p, resumed, pending = start(cfg, resume, d, given)
    out = Outputs.open(run, p)
    stopping = lambda: bool(allreduce_scalars({"s": float(stop.signal is not None)}, d, "max")["s"])
    if cfg.eval.before and not resumed:
        before, run.baseline = eval_on_main(run, "before")
        p.summary.update(before)
        p.eval_rows.append(log_eval(run, out.evals, 0, before, "before", 0.0))
    started = time.perf_counter() - p.train_seconds  # the training clock, carried over a resume
    clock = lambda: time.perf_counter() - started
    settings = UpdateSettings.of(cfg, run.pad_id, run.precision)
    bar = progress(cfg.train.steps, initial=p.step, disable=not d.is_main)
    run.policy.train()
    stopped = False
    with Rollouts(lambda step: collect(run, step), run.engine, run.policy,
                  one_step_off=cfg.rollout.overlap == "one_step_off", updates=p.step, pending=pending) as rollouts:
        for step in range(p.step + 1, cfg.train.steps + 1):
            if stopped := stopping():  # arrived before this step began
                try_checkpoint(run, p, clock(), rollouts.state())
                break
            entropy = EntropyState(cfg.algo.entropy_coef if p.entropy_coef is None else p.entropy_coef,
                                   p.last_entropy)
            m, collected = train_step(run, step, settings, rollouts, entropy)
            if cfg.algo.adaptive_entropy:  # the controller's next state, carried and checkpointed in p
                entropy = entropy.after(cfg.algo, m["entropy/watched_mean"])
                p.entropy_coef, p.last_entropy = entropy.coef, entropy.last_entropy
            log_step(run, p, out, step, m, collected)
            if cfg.train.eval_every and step % cfg.train.eval_every == 0 and step != cfg.train.steps:
                evaluate_mid(run, p, out, step, clock)
            bar.set_postfix(live_postfix(m, p.eval_rows))
            bar.update(1)
            p.step = p.summary["steps"] = step
            stopped = stopping()
            every = cfg.train.save_every
            if stopped or step == cfg.train.steps or (every and step % every == 0):
                try_checkpoint(run, p, clock(), rollouts.state())
            if stopped:
                break
    bar.close()
    interrupted = (stop.signal or "a signal to another process") if stopped else None
    return finish(run, p, out, interrupted, clock())
