"""One policy update on a rollout batch: micro-batches of whole groups, `iterations` optimizer steps."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.algo import aggregate, kl_estimate, policy_loss, value_loss
from rlvr.train.logprobs import completion_logprobs


@dataclass
class Batch:
    prompts: list[list[int]]  # P prompt token lists
    completion_ids: torch.Tensor  # [B, Tc], B = P * G
    completion_mask: torch.Tensor  # [B, Tc]
    advantages: torch.Tensor  # [B] or [B, Tc]
    group_size: int
    returns: torch.Tensor | None = None  # [B, Tc] value targets (PPO)
    old_values: torch.Tensor | None = None  # [B, Tc] critic values at rollout time (PPO)


@dataclass
class UpdateSettings:
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    ratio_level: str = "token"
    aggregation: str = "seq-mean-token-mean"
    norm_length: int | None = None  # for seq-mean-token-sum-norm; None: the batch's width
    iterations: int = 1
    beta: float = 0.0  # KL coefficient in the loss (KL in the reward is folded into the advantages)
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    micro_batch_prompts: int = 4
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    pad_id: int = 0


def _micro_batches(batch: Batch, prompts_per_mb: int) -> list[tuple[list[list[int]], slice, int]]:
    """(prompts, row slice, width): whole groups, each trimmed to its own longest completion."""
    g, out = batch.group_size, []
    for i in range(0, len(batch.prompts), prompts_per_mb):
        rows = slice(i * g, (i + prompts_per_mb) * g)
        width = max(int(batch.completion_mask[rows].sum(-1).max()), 1)
        out.append((batch.prompts[i:i + prompts_per_mb], rows, width))
    return out


def _weight(mask: torch.Tensor, full_mask: torch.Tensor, aggregation: str) -> float:
    """Share of a micro-batch in the full-batch mean, so accumulated gradients equal one full pass."""
    if aggregation == "token-mean":
        return float(mask.sum() / full_mask.sum().clamp(min=1))
    if aggregation == "seq-mean-token-mean":
        return float((mask.sum(-1) > 0).sum() / (full_mask.sum(-1) > 0).sum().clamp(min=1))
    return mask.shape[0] / full_mask.shape[0]


def _cut(x: torch.Tensor | None, rows: slice, width: int) -> torch.Tensor | None:
    if x is None:
        return None
    return x[rows] if x.dim() == 1 else x[rows, :width]


def policy_update(policy, optimizer, batch: Batch, s: UpdateSettings, ref=None, critic=None) -> dict[str, float]:
    """Clipped-surrogate update (+ beta * KL to `ref` in the loss, + entropy bonus, + value loss of
    `critic`, a head on the policy's hidden states). Returns step metrics as floats."""
    mbs = _micro_batches(batch, s.micro_batch_prompts)
    norm_length = s.norm_length or batch.completion_ids.shape[1]
    want_ref = s.beta > 0 and ref is not None
    ref_logp = [None] * len(mbs)
    if want_ref:
        with torch.no_grad():
            ref_logp = [completion_logprobs(ref, p, batch.completion_ids[sl, :w], batch.completion_mask[sl, :w],
                                            batch.group_size, s.pad_id, s.temperature) for p, sl, w in mbs]
    old_logp: list[torch.Tensor | None] = [None] * len(mbs)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    metrics: dict[str, float] = {}
    skipped = 0
    for _ in range(s.iterations):
        optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "value_loss": 0.0}
        n_tok, stats = 0.0, {}
        for k, (prompts, sl, w) in enumerate(mbs):
            mask = batch.completion_mask[sl, :w]  # [b, w]
            out = completion_logprobs(policy, prompts, batch.completion_ids[sl, :w], mask, batch.group_size,
                                      s.pad_id, s.temperature, with_hidden=critic is not None, with_entropy=True)
            logp = out.logp  # [b, w]
            if old_logp[k] is None:  # the first pass is the behaviour policy (no update yet)
                old_logp[k] = logp.detach()
            loss, m = policy_loss(logp, old_logp[k], _cut(batch.advantages, sl, w), mask, s.clip_low, s.clip_high,
                                  s.dual_clip, s.ratio_level, s.aggregation, norm_length)
            if want_ref:
                kl = kl_estimate(logp, ref_logp[k], s.kl_estimator)  # [b, w]
                loss = loss + s.beta * aggregate(kl, mask, s.aggregation, norm_length)
                sums["kl"] += float((kl.detach() * mask).sum())
            if s.entropy_coef != 0:
                loss = loss - s.entropy_coef * aggregate(out.entropy, mask, s.aggregation, norm_length)
            sums["entropy"] += float((out.entropy.detach() * mask).sum())
            if critic is not None:
                values = critic(out.hidden).squeeze(-1)  # [b, w]
                v_loss = value_loss(values, _cut(batch.old_values, sl, w), _cut(batch.returns, sl, w), mask,
                                    s.value_clip, "token-mean")
                loss = loss + s.value_coef * v_loss
                sums["value_loss"] += float(v_loss.detach()) * float(mask.sum())
            loss = loss * _weight(mask, batch.completion_mask, s.aggregation)
            loss.backward()
            sums["loss"] += float(loss.detach())
            n_tok += float(mask.sum())
            for key, v in m.items():
                stats.setdefault(key, []).append(float(v))
        limit = s.max_grad_norm if s.max_grad_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        if math.isfinite(grad_norm) and math.isfinite(sums["loss"]):
            optimizer.step()
        else:  # a non-finite step would poison the weights: skip it and say so in the metrics
            skipped += 1
            optimizer.zero_grad(set_to_none=True)
        metrics = {"loss": sums["loss"], "grad_norm": grad_norm,
                   "kl": sums["kl"] / max(n_tok, 1) if want_ref else None}
        metrics["entropy"] = sums["entropy"] / max(n_tok, 1)
        if critic is not None:
            metrics["value_loss"] = sums["value_loss"] / max(n_tok, 1)
        metrics.update({k: sum(v) / len(v) for k, v in stats.items() if not k.startswith("ratio/m")})
        metrics["ratio/min"] = min(stats["ratio/min"])
        metrics["ratio/max"] = max(stats["ratio/max"])
    metrics["skipped_updates"] = skipped
    optimizer.zero_grad(set_to_none=True)
    return metrics
