"""One policy update on a rollout batch: micro-batches of whole groups, `iterations` optimizer steps."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.algo import aggregate, kl_estimate, policy_loss, value_loss
from rlvr.rollout.vllm_engine import tis_weights
from rlvr.train import distributed as dd
from rlvr.train.logprobs import Reference, completion_logprobs, reference_logprobs


@dataclass
class Batch:
    prompts: list[list[int]]  # P prompt token lists
    completion_ids: torch.Tensor  # [B, Tc], B = P * G
    completion_mask: torch.Tensor  # [B, Tc]
    advantages: torch.Tensor  # [B] or [B, Tc]
    group_size: int
    returns: torch.Tensor | None = None  # [B, Tc] value targets (PPO)
    old_values: torch.Tensor | None = None  # [B, Tc] critic values at rollout time (PPO)
    sampler_logp: torch.Tensor | None = None  # [B, Tc] the engine's log-probs, compared on the first pass


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
    micro_batch_tokens: int = 0  # > 0: fill micro-batches by this token budget instead (see _micro_batches)
    mixed_precision: str = "no"  # bf16: autocast the policy (and reference) forwards to bfloat16
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    pad_id: int = 0
    tis_cap: float = 0.0  # > 0: truncated importance sampling, tokens weighted by min(pi_old / pi_sampler, cap)


def _micro_batches(batch: Batch, prompts_per_mb: int, tokens_per_mb: int = 0
                   ) -> list[tuple[list[list[int]], slice, int]]:
    """(prompts, row slice, width): whole groups, each micro-batch trimmed to its longest completion.

    With tokens_per_mb > 0, consecutive groups are added while the micro-batch's padded size, the
    tokens its shared-prefix forward holds (n prompts x longest prompt + n * G x longest completion),
    stays within the budget; a group larger than the budget goes alone.
    """
    g, n_prompts = batch.group_size, len(batch.prompts)
    lengths = batch.completion_mask.sum(-1).view(n_prompts, g).amax(-1).clamp(min=1).tolist()  # [P]

    def tokens(a: int, b: int) -> float:  # groups a..b-1 as one micro-batch
        return (b - a) * (max(len(p) for p in batch.prompts[a:b]) + g * max(lengths[a:b]))

    bounds, start = [], 0
    while start < n_prompts:
        end = min(start + prompts_per_mb, n_prompts)
        if tokens_per_mb > 0:
            end = start + 1
            while end < n_prompts and tokens(start, end + 1) <= tokens_per_mb:
                end += 1
        bounds.append((start, end))
        start = end
    return [(batch.prompts[a:b], slice(a * g, b * g), int(max(lengths[a:b]))) for a, b in bounds]


def _cut(x: torch.Tensor | None, rows: slice, width: int) -> torch.Tensor | None:
    if x is None:
        return None
    return x[rows] if x.dim() == 1 else x[rows, :width]


def _autocast(policy, s: UpdateSettings):
    """bf16 autocast on the policy's device type when train.mixed_precision is bf16."""
    device = next(policy.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=s.mixed_precision == "bf16")


def _micro_loss(policy, batch: Batch, s: UpdateSettings, mb, old_logp, ref_logp, critic, norm_length):
    """Forward one micro-batch; returns (new log-probs [b, w] detached, unweighted loss, sums, stats)."""
    prompts, sl, w = mb
    mask = batch.completion_mask[sl, :w]  # [b, w]
    with _autocast(policy, s):
        out = completion_logprobs(policy, prompts, batch.completion_ids[sl, :w], mask, batch.group_size,
                                  s.pad_id, s.temperature, with_hidden=critic is not None, with_entropy=True)
        values = critic(out.hidden).squeeze(-1).float() if critic is not None else None  # [b, w]
    logp = out.logp  # [b, w]
    old = logp.detach() if old_logp is None else old_logp  # the first pass is the behaviour policy
    adv = _cut(batch.advantages, sl, w)
    if s.tis_cap > 0 and batch.sampler_logp is not None:  # the sampler (e.g. vLLM) is not exactly the trainer
        adv = (adv[:, None] if adv.dim() == 1 else adv) * tis_weights(old, batch.sampler_logp[sl, :w], mask, s.tis_cap)
    loss, stats = policy_loss(logp, old, adv, mask, s.clip_low, s.clip_high,
                              s.dual_clip, s.ratio_level, s.aggregation, norm_length)
    sums = {"entropy": float((out.entropy.detach() * mask).sum())}
    if ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, s.kl_estimator)  # [b, w]
        loss = loss + s.beta * aggregate(kl, mask, s.aggregation, norm_length)
        sums["kl"] = float((kl.detach() * mask).sum())
    if s.entropy_coef != 0:
        loss = loss - s.entropy_coef * aggregate(out.entropy, mask, s.aggregation, norm_length)
    if values is not None:
        v_loss = value_loss(values, _cut(batch.old_values, sl, w), _cut(batch.returns, sl, w), mask,
                            s.value_clip, "token-mean")
        loss = loss + s.value_coef * v_loss
        sums["value_loss"] = float(v_loss.detach()) * float(mask.sum())
    return logp.detach(), loss, sums, stats


def _mismatch(new_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(sum, max) of |trainer - sampler| log-prob over real tokens of one micro-batch."""
    diff = (new_logp - sampler_logp).abs() * mask  # [b, w]
    return float(diff.sum()), float(diff.max()) if diff.numel() else 0.0


def _reduce(sums: dict, n_tok: float, mismatch: list, stats: dict, dist: dd.Dist):
    """Loss parts, token count and micro-batch stats summed (ratio range: min / max) over ranks."""
    total = dd.allreduce_scalars({**{f"s/{k}": v for k, v in sums.items()}, "n_tok": n_tok,
                                  "mismatch": mismatch[0], "n_mb": len(stats["ratio/min"]),
                                  **{f"m/{k}": sum(v) for k, v in stats.items() if not k.startswith("ratio/m")}},
                                 dist)
    lo = dd.allreduce_scalars({"r": min(stats["ratio/min"])}, dist, "min")["r"]
    hi = dd.allreduce_scalars({"r": max(stats["ratio/max"]), "m": mismatch[1]}, dist, "max")
    n_mb = total["n_mb"]
    stats = {k[2:]: [v / n_mb] for k, v in total.items() if k.startswith("m/")}
    stats["ratio/min"], stats["ratio/max"] = [lo], [hi["r"]]
    return ({k[2:]: v for k, v in total.items() if k.startswith("s/")}, total["n_tok"],
            [total["mismatch"], hi["m"]], stats)


def policy_update(policy, optimizer, batch: Batch, s: UpdateSettings, ref: Reference | torch.nn.Module | None = None,
                  critic=None, dist: dd.Dist = dd.Dist()) -> dict[str, float]:
    """Clipped-surrogate update (+ beta * KL to `ref` in the loss, + entropy bonus, + value loss of
    `critic`, a head on the policy's hidden states). Returns step metrics as floats.

    Old log-probs are the policy's own on the first pass (ratio 1 there); with batch.sampler_logp, that
    first pass is compared with the sampler's in rollout/logp_mismatch_*. A step whose loss or gradient
    is not finite is skipped (no optimizer step) and counted in skipped_updates.

    Under torch.distributed (`dist`), `batch` is this rank's shard of whole groups: each micro-batch's
    loss is weighted by its share of the GLOBAL batch and gradients are summed over ranks, so the step
    equals one process on the global batch; the returned metrics are global too.
    """
    if isinstance(ref, torch.nn.Module):
        ref = Reference(ref)
    mbs = _micro_batches(batch, s.micro_batch_prompts, s.micro_batch_tokens)
    norm_length = s.norm_length or batch.completion_ids.shape[1]
    denominator = dd.batch_denominator(batch.completion_mask, s.aggregation, dist)
    want_ref = s.beta > 0 and ref is not None
    ref_logp = [None] * len(mbs)
    if want_ref:
        with _autocast(policy, s):  # the same precision as the policy, so KL is 0 at equal weights
            ref_logp = [reference_logprobs(ref, p, batch.completion_ids[sl, :w], batch.completion_mask[sl, :w],
                                           batch.group_size, s.pad_id, s.temperature) for p, sl, w in mbs]
    old_logp: list[torch.Tensor | None] = [None] * len(mbs)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    metrics: dict[str, float] = {}
    skipped = 0
    for it in range(s.iterations):
        optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "value_loss": 0.0}
        n_tok, stats, mismatch = 0.0, {}, [0.0, 0.0]
        for k, mb in enumerate(mbs):
            mask = batch.completion_mask[mb[1], :mb[2]]  # [b, w]
            logp, loss, part, m = _micro_loss(policy, batch, s, mb, old_logp[k], ref_logp[k], critic, norm_length)
            if old_logp[k] is None:
                old_logp[k] = logp
            if it == 0 and batch.sampler_logp is not None:
                total, peak = _mismatch(logp, batch.sampler_logp[mb[1], :mb[2]], mask)
                mismatch = [mismatch[0] + total, max(mismatch[1], peak)]
            loss = loss * dd.loss_weight(mask, denominator, s.aggregation)
            loss.backward()
            sums["loss"] += float(loss.detach())
            for key, v in part.items():
                sums[key] += v
            n_tok += float(mask.sum())
            for key, v in m.items():
                stats.setdefault(key, []).append(float(v))
        dd.allreduce_gradients(params, dist)
        limit = s.max_grad_norm if s.max_grad_norm > 0 else math.inf
        grad_norm = (dd.clip_grad_norm(params, limit, dist) if dist.enabled
                     else float(torch.nn.utils.clip_grad_norm_(params, limit)))
        if dist.enabled:  # global sums before the finite check, so every rank makes the same decision
            sums, n_tok, mismatch, stats = _reduce(sums, n_tok, mismatch, stats, dist)
        if math.isfinite(grad_norm) and math.isfinite(sums["loss"]):
            optimizer.step()
        else:  # a non-finite step would poison the weights: skip it and say so in the metrics
            skipped += 1
            optimizer.zero_grad(set_to_none=True)
        if it == 0 and batch.sampler_logp is not None:
            metrics["rollout/logp_mismatch_mean_abs"] = mismatch[0] / max(n_tok, 1)
            metrics["rollout/logp_mismatch_max"] = mismatch[1]
        metrics.update({"loss": sums["loss"], "grad_norm": grad_norm,
                        "kl": sums["kl"] / max(n_tok, 1) if want_ref else None,
                        "entropy": sums["entropy"] / max(n_tok, 1)})
        if critic is not None:
            metrics["value_loss"] = sums["value_loss"] / max(n_tok, 1)
        metrics.update({k: sum(v) / len(v) for k, v in stats.items() if not k.startswith("ratio/m")})
        metrics["ratio/min"] = min(stats["ratio/min"])
        metrics["ratio/max"] = max(stats["ratio/max"])
    metrics["skipped_updates"] = skipped
    optimizer.zero_grad(set_to_none=True)
    return metrics
