"""Per-step metrics and sample records, from one collected batch and its update."""
from __future__ import annotations

import statistics

import torch


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
              "completion/truncated_frac": float(rollout.truncated.float().mean()),
              "tokens/generated": int(lengths.sum())})
    m.update(update)
    m.update({"time/step_s": t_step, "time/rollout_s": t_roll, "time/train_s": t_train})
    return m


def sample_records(step, collected, rewards) -> list[dict]:
    g, scores = collected.rollout.group_size, collected.scores
    return [{"step": step, "prompt": collected.problems[i // g].question,
             "answer": collected.problems[i // g].answer, "completion": text,
             "reward": scores.total[i],
             "rewards": {rf.name: {"score": scores.per_function[rf.name][i],
                                   "reason": scores.reasons[rf.name][i]} for rf in rewards}}
            for i, text in enumerate(collected.texts)]
