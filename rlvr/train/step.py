"""One GRPO step, in phases, each a plain function: `collect` (this step's prompts, G completions each,
their rewards and scores), then `learn` (make_batch: old and reference log-probs, advantages; then
policy_update), and `train_step`, which does both with the rollout one step ahead where asked
(rlvr/train/overlap.py). Every phase reads its own settings (`run.settings`), never the config; the run
around the steps is rlvr/train/grpo.py's."""
from __future__ import annotations

import time

import torch

from rlvr.device import peak_memory_gib, reset_peak_memory, sampling_autocast
from rlvr.report.console import say
from rlvr.rewards import score_batch, strict_rewards
from rlvr.rewards.base import Scores, defined_at, failure_reason
from rlvr.rewards.call import TrainerState
from rlvr.envs.episodes import reward_inputs, run_episodes
from rlvr.rollout.decoding import select_groups
from rlvr.rollout.sampling import group_seed, update_seed
from rlvr.train.batch import make_batch, old_policy_forward, with_advantages
from rlvr.train.distributed import gather_objects, gathered, reduce_metrics, shard_groups
from rlvr.train.metrics import step_metrics
from rlvr.train.optim import current_lr
from rlvr.train.overlap import Rollouts
from rlvr.train.state import Collected, Run, merge_collected
from rlvr.train.update import EntropyState, policy_update, reference_forward


def _on_reward_error(run: Run):
    def warn(name: str, e: BaseException, row: str) -> None:
        if name not in run.warned:
            run.warned.add(name)
            rf = next(rf for rf in run.data.rewards if rf.name == name)
            where = f" ({defined_at(rf)})" if rf.user else ""
            say(f"warning: reward function '{name}'{where} failed on {row}: "
                f"{failure_reason(e).removeprefix('reward function ')}; its failed completions score 0 and are "
                f"counted in reward/{name}/errors")
    return warn


def group_pass_rates(rewards: list, scores: Scores, group_size: int) -> list[float]:
    """Mean of the strict correctness reward (else the total) over each group: what the curriculum sees."""
    strict = strict_rewards(rewards)
    values = scores.per_function[strict[0].name] if strict else scores.total
    return torch.tensor(values, dtype=torch.float64).view(-1, group_size).mean(1).tolist()


def sample_and_score(run: Run, n_prompts: int, step: int, round_: int = 0) -> Collected:
    """Phases 1-3: draw prompts, sample G completions each, score them. Group i of the global batch
    samples from group_seed(train.seed, step, round * n_prompts + i), whichever rank holds it."""
    r, d, data = run.settings.rollout, run.dist, run.data
    idx = data.sampler.next(n_prompts, step)  # the same global batch on every rank
    mine = shard_groups(len(idx), d.rank, d.world)  # this rank's whole groups
    problems = [data.splits.train[i] for i in idx[mine]]
    seeds = [group_seed(r.seed, step, round_ * n_prompts + i) for i in range(mine.start, mine.stop)]
    with gathered(run.models.policy), sampling_autocast(d.device, r.precision):  # FSDP: this rank holds the full weights while it samples
        ep = run_episodes(run.engine, data.env, problems, group_size=r.group_size, sampling=r.sampling, seeds=seeds)
    run.engine.sleep()
    rollout, texts = ep.rollout, ep.texts  # texts: each episode's final answer
    completions, columns = reward_inputs(problems, ep, r.group_size)  # as TRL passes them
    origins = [p.origin or repr(p.question[:80]) for p in problems for _ in range(r.group_size)]
    t0 = time.perf_counter()
    scores = score_batch(data.rewards, completions, columns, _on_reward_error(run),  # code: across the sandbox pool
                         shared={"trainer_state": TrainerState(step - 1, r.steps)}, origins=origins,
                         stop_if_all_fail=True)
    reward_s = time.perf_counter() - t0
    passes = [x for part in gather_objects(group_pass_rates(data.rewards, scores, r.group_size), d) for x in part]
    data.sampler.observe(idx, passes, step)  # every rank's sampler sees the whole batch
    episodes = ep.records if data.env.multi_turn else []  # single-turn tasks log what they always logged
    return Collected(problems=problems, rollout=rollout, texts=texts, scores=scores,
                     metrics={"time/reward_s": reward_s, **logged_metrics(scores)}, episodes=episodes)


def memory_metrics(rollout: float | None, update: float | None) -> dict[str, float]:
    """Peak memory of the step's phases in GiB (rlvr.device.peak_memory_gib: CUDA tensors on a GPU, the
    process's resident set on the CPU): rollout (an engine with weights of its own taking the last update,
    sampling and scoring), update (advantages, the policy update) and the whole step; absent where it
    cannot be read."""
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
    r = run.settings.rollout
    want, g = r.prompts_per_step, r.group_size
    if not r.dynamic_sampling:
        out = sample_and_score(run, want, step)
        out.sampler = run.data.sampler.metrics()
        return out
    kept: list[tuple[Collected, int]] = []
    dropped = rounds = 0
    last, reward_s = None, 0.0
    while len(kept) < want and rounds <= r.max_refill:
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
    out = merge_collected([Collected(problems=[c.problems[i]], rollout=select_groups(c.rollout, [i]),
                                     texts=[c.texts[j] for j in rows(i)],
                                     scores=c.scores.select(rows(i)), metrics={},
                                     episodes=[c.episodes[j] for j in rows(i) if c.episodes]) for c, i in kept],
                          r.sampling.pad_id)
    out.metrics = {"dynamic/dropped_groups": dropped, "dynamic/rounds": rounds, "time/reward_s": reward_s,
                   **logged_metrics(out.scores)}
    out.sampler = run.data.sampler.metrics()
    return out


def learn(run: Run, collected: Collected, step: int, entropy: EntropyState | None = None) -> tuple[dict, dict]:
    """Phases 4-8: the batch on the device, the forwards before the update, advantages, the policy update,
    then the schedule and the reference. Returns (update metrics, advantage metrics). entropy: the
    adaptive entropy controller's state (None: its start)."""
    m, s = run.models, run.settings.update
    batch, crossed = make_batch(run, collected)                           # 4. the batch on the device
    # the forwards of a step: the reference (only with a KL term), the policy before its update (only for the
    # KL in the reward or a critic), then one forward + backward per micro-batch and algo.iterations
    ref_logp = reference_forward(m.ref, batch, s)                         # 5. reference forward
    old_logp, values = old_policy_forward(run, batch)                     # 6. old-policy forward
    batch, adv_metrics = with_advantages(s.advantages, s.kl, batch, old_logp, ref_logp, values)  # 7. advantages
    update = policy_update(m.policy, m.optimizer, batch, s, ref_logp, m.critic, run.dist, entropy,  # 8.
                           seed=update_seed(run.settings.rollout.seed, step, run.dist.rank))
    m.scheduler.step()
    if m.ref is not None and s.ref_sync_every and step % s.ref_sync_every == 0:
        m.ref.sync(m.policy, s.ref_mixup)
    return update, {**adv_metrics, **crossed}


def train_step(run: Run, step: int, rollouts: Rollouts, entropy: EntropyState | None = None
               ) -> tuple[dict, Collected]:
    """Phases 1-9 of one step; returns its metrics row and the global batch. entropy: as `learn`'s."""
    device, m_, settings = run.dist.device, run.models, run.settings.update
    reset_peak_memory(device)
    t0 = time.perf_counter()
    collected = rollouts.take(step, run.settings.steps)                    # 1-3. prompts, rollout, rewards
    t1 = time.perf_counter()
    rollout_peak = peak_memory_gib(device)
    reset_peak_memory(device)
    lr = current_lr(m_.scheduler)  # the rate this step's update uses: learn steps the schedule after it
    update, adv_metrics = learn(run, collected, step, entropy)            # 4-8. forwards, update
    rollouts.updated()  # on-policy: the next rollout samples from the updated policy
    t2 = time.perf_counter()
    whole, extra = collected, {**adv_metrics, **collected.metrics,       # 9. report, on the global batch
                               **memory_metrics(rollout_peak, peak_memory_gib(device))}
    if run.dist.enabled:
        whole = merge_collected(gather_objects(collected, run.dist), settings.pad_id)
        extra = reduce_metrics(extra, run.dist, len(collected.texts))
    m = step_metrics(step, whole, update, run.data.rewards, t2 - t0, t1 - t0, t2 - t1)
    m.update(extra)
    m.update(getattr(collected, "sampler", {}))  # a batch pickled by an older checkpoint has no such field
    m["time/reward_share"] = m["time/reward_s"] / max(m["time/step_s"], 1e-9)  # of the step, in scoring
    m["lr"] = lr
    m["processes"] = run.dist.world  # the figures are the global batch's; a resume may change the count
    return m, whole
