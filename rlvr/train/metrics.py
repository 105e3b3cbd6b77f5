"""Per-step metrics and sample records, from one collected batch and its update."""
from __future__ import annotations

import re
import statistics

import torch

from rlvr.envs.episode_metrics import episode_metrics
from rlvr.rewards import strict_rewards
from rlvr.rewards.workers import current

# Phrases the DeepSeek-R1 report ties to longer, self-checking reasoning.
SELF_VERIFICATION = re.compile(r"\b(wait|let me check|let me verify|verify|double[- ]check)\b", re.IGNORECASE)


def step_metrics(step, collected, update, rewards, t_step, t_roll, t_train) -> dict:
    rollout, scores = collected.rollout, collected.scores
    lengths = rollout.completion_mask.sum(-1)  # [B]
    rows = torch.tensor(scores.total).view(-1, rollout.group_size)  # [P, G]
    m = {"step": step, "reward/mean": float(rows.mean()), "reward/std": float(rows.std()),
         "frac_zero_std_groups": float((rows.std(dim=1) == 0).float().mean())}
    for rf in rewards:
        m[f"reward/{rf.name}/mean"] = statistics.fmean(scores.per_function[rf.name])
        m[f"reward/{rf.name}/errors"] = scores.errors[rf.name]
    m.update({"completion/length_mean": float(lengths.mean()),
              "completion/length_p90": float(torch.quantile(lengths, 0.9)),
              "completion/truncated_frac": float(rollout.truncated.float().mean()),
              "completion/self_verification_rate": statistics.fmean(
                  bool(SELF_VERIFICATION.search(t)) for t in collected.texts),
              "completions": len(collected.texts), "tokens/generated": int(lengths.sum())})
    m.update(episode_metrics(collected.episodes))  # env/*: multi-turn runs only
    m.update(pass_rates(collected, rewards))
    m.update(code_metrics(scores, rewards))
    m["reward/checker_restarts"] = current().maths_restarts  # cumulative over the run
    m.update(update)
    m.update({"time/step_s": t_step, "time/rollout_s": t_roll, "time/train_s": t_train})
    return m


def sample_records(step, collected, rewards) -> list[dict]:
    """One record per completion; a multi-turn episode's record also holds its turns ("episode"), and
    "completion" is its final answer."""
    g, scores = collected.rollout.group_size, collected.scores
    records = [{"step": step, "prompt": collected.problems[i // g].question,
                "answer": collected.problems[i // g].answer, "completion": text,
                "reward": scores.total[i],
                "rewards": {rf.name: {"score": scores.per_function[rf.name][i],
                                      "reason": scores.reasons[rf.name][i]} for rf in rewards}}
               for i, text in enumerate(collected.texts)]
    plain = lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else str(v)
    for i, rec in enumerate(records):  # TRL's log_extra columns, as its completions table shows them
        if scores.extra:
            rec["extra"] = {k: plain(v[i]) for k, v in scores.extra.items()}
    for rec, ep in zip(records, collected.episodes):  # none for single-turn tasks
        rec["episode"] = ep
    return records


def code_metrics(scores, rewards) -> dict:
    """code/<outcome>_frac: the share of completions per outcome of the first code reward (timeouts,
    syntax errors, sandbox errors, visible examples passed but a hidden test failed, ...)."""
    rf = next((rf for rf in rewards if rf.reward is not None and rf.reward.outcomes), None)
    if rf is None:
        return {}
    kinds = scores.outcomes.get(rf.name, [])   # Verdict.outcome: what the reward said, not its words re-read
    return {f"code/{k}_frac": kinds.count(k) / max(len(kinds), 1) for k in rf.reward.outcomes}


def pass_rates(collected, rewards) -> dict:
    """pass_rate/<difficulty>: mean score of the first correctness-checking reward, per difficulty."""
    strict = strict_rewards(rewards)
    if not strict:
        return {}
    scores, g = collected.scores.per_function[strict[0].name], collected.rollout.group_size
    by: dict[str, list[float]] = {}
    for i, s in enumerate(scores):
        by.setdefault(collected.problems[i // g].difficulty or "all", []).append(s)
    return {f"pass_rate/{d}": statistics.fmean(v) for d, v in sorted(by.items())}
