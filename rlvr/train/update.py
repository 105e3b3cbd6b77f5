"""One policy update on a rollout batch: micro-batches of whole groups, `iterations` optimizer steps."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.algo import aggregate, kl_estimate, policy_loss
from rlvr.train.logprobs import completion_logprobs


@dataclass
class Batch:
    prompts: list[list[int]]  # P prompt token lists
    completion_ids: torch.Tensor  # [B, Tc], B = P * G
    completion_mask: torch.Tensor  # [B, Tc]
    advantages: torch.Tensor  # [B]
    group_size: int


@dataclass
class UpdateSettings:
    clip_low: float
    clip_high: float
    iterations: int
    beta: float
    aggregation: str
    micro_batch_prompts: int
    max_grad_norm: float
    temperature: float
    pad_id: int


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


def policy_update(policy, optimizer, batch: Batch, s: UpdateSettings, ref=None) -> dict[str, float]:
    """Clipped-surrogate GRPO update (+ beta * k3 KL to `ref`). Returns step metrics as floats."""
    mbs = _micro_batches(batch, s.micro_batch_prompts)
    tc = batch.completion_ids.shape[1]
    ref_logp = [None] * len(mbs)
    if s.beta > 0 and ref is not None:
        with torch.no_grad():
            ref_logp = [completion_logprobs(ref, p, batch.completion_ids[sl, :w], batch.completion_mask[sl, :w],
                                            batch.group_size, s.pad_id, s.temperature) for p, sl, w in mbs]
    old_logp: list[torch.Tensor | None] = [None] * len(mbs)
    params = [p for p in policy.parameters() if p.requires_grad]
    metrics: dict[str, float] = {}
    skipped = 0
    for it in range(s.iterations):
        optimizer.zero_grad(set_to_none=True)
        loss_sum, kl_sum, n_tok, stats = 0.0, 0.0, 0.0, {}
        for k, (prompts, sl, w) in enumerate(mbs):
            mask = batch.completion_mask[sl, :w]  # [b, w]
            logp = completion_logprobs(policy, prompts, batch.completion_ids[sl, :w], mask,
                                       batch.group_size, s.pad_id, s.temperature)  # [b, Tc]
            if old_logp[k] is None:  # the first pass is the behaviour policy (no update yet)
                old_logp[k] = logp.detach()
            tok_loss, m = policy_loss(logp, old_logp[k], batch.advantages[sl], mask, s.clip_low, s.clip_high)
            if ref_logp[k] is not None:
                kl = kl_estimate(logp, ref_logp[k], "k3")  # [b, Tc]
                tok_loss = tok_loss + s.beta * kl
                kl_sum += float((kl.detach() * mask).sum())
            loss = aggregate(tok_loss, mask, s.aggregation, norm_length=tc) * _weight(
                mask, batch.completion_mask, s.aggregation)
            loss.backward()
            loss_sum += float(loss.detach())
            n_tok += float(mask.sum())
            for key, v in m.items():
                stats.setdefault(key, []).append(float(v))
        limit = s.max_grad_norm if s.max_grad_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        if math.isfinite(grad_norm) and math.isfinite(loss_sum):
            optimizer.step()
        else:  # a non-finite step would poison the weights: skip it and say so in the metrics
            skipped += 1
            optimizer.zero_grad(set_to_none=True)
        metrics = {"loss": loss_sum, "grad_norm": grad_norm,
                   "kl": kl_sum / max(n_tok, 1) if ref is not None and s.beta > 0 else None}
        metrics.update({k: sum(v) / len(v) for k, v in stats.items() if not k.startswith("ratio/m")})
        metrics["ratio/min"] = min(stats["ratio/min"])
        metrics["ratio/max"] = max(stats["ratio/max"])
    metrics["skipped_updates"] = skipped
    optimizer.zero_grad(set_to_none=True)
    return metrics
