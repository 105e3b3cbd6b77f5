"""One policy update on a rollout batch: micro-batches of whole groups, `iterations` optimizer steps."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.algo import (adaptive_entropy_coef, aggregate, entropy_bonus, entropy_bonus_coef, high_entropy_mask,
                       kl_estimate, loss_units, off_policy_mask, policy_loss, row_widths, sampler_weights, value_loss)
from rlvr.algo.objectives import NoKnobs
from rlvr.models.lora import seeded_dropouts
from rlvr.train import distributed as dd
from rlvr.report import schema
from rlvr.train.batch import AdvantageSettings, Batch, KLSettings
from rlvr.device import autocast
from rlvr.train.forward import MAX_BUCKETS, Reference, completion_forward, reference_logprobs, reference_precision
from rlvr.train.head import use_fused_head
from rlvr.train.optim import step_keeping_finite

# from the metric schema (rlvr/report/schema.py): policy_loss's statistics that are means over real tokens,
# combined over micro-batches weighted by their tokens (kl and entropy are summed by the update itself);
# the token weights' metrics, each a count over real tokens or sequences, reported as a share of them
TOKEN_MEANS = tuple(k for k in schema.names(schema.TOKEN_MEAN) if k not in ("kl", "entropy"))
WEIGHT_TOKEN_COUNTS = schema.names(schema.TOKEN_SHARE)
WEIGHT_SEQ_COUNTS = schema.names(schema.SEQ_SHARE)


@dataclass(frozen=True, kw_only=True)
class EntropySettings:
    """The entropy bonus's coefficient, fixed or under algo.adaptive_entropy's controller."""

    coef: float  # algo.entropy_coef: the bonus's coefficient (adaptive: the controller's start)
    adaptive: bool  # algo.adaptive_entropy
    target: float  # algo.entropy_target
    coef_delta: float  # algo.entropy_coef_delta
    coef_min: float  # algo.entropy_coef_min
    coef_max: float  # algo.entropy_coef_max


@dataclass(frozen=True)
class EntropyState:
    """The entropy bonus's coefficient between steps under algo.adaptive_entropy (Skywork-OR1's controller,
    rlvr.algo.adaptive_entropy_coef): state the loop carries in Progress and the checkpoint holds, so a
    resumed run applies the coefficients of the run left alone. Without adaptive_entropy the coefficient
    is algo.entropy_coef at every step."""

    coef: float
    last_entropy: float = math.inf  # the mean entropy of the last step's watched tokens (none yet: inf)

    def applied(self, e: EntropySettings) -> float:
        """The coefficient of this step's bonus."""
        if not e.adaptive:
            return e.coef
        return entropy_bonus_coef(self.coef, self.last_entropy, e.target)

    def after(self, e: EntropySettings, entropy: float) -> EntropyState:
        """The state after a step whose watched tokens' mean entropy was `entropy`."""
        if not e.adaptive:
            return self
        return EntropyState(adaptive_entropy_coef(self.coef, entropy, e.target, e.coef_delta, e.coef_min, e.coef_max),
                            entropy)


@dataclass(frozen=True, kw_only=True)
class UpdateSettings:
    """What learning from a step's batch reads (rlvr.train.step.learn: the batch, the forwards before the
    update, the advantages, policy_update, the reference's sync), each setting once, as a typed value.
    Built from a run's config by rlvr.train.settings.update_settings (tests too): no field has a default,
    so none can be left out."""

    pad_id: int  # the tokenizer's
    temperature: float  # rollout.temperature: training log-probs are tempered like the samples
    mixed_precision: str  # train.mixed_precision resolved; bf16 autocasts the policy and reference forwards
    lm_head: str  # train.lm_head: how the update's forward scores tokens (head.use_fused_head)
    packed: bool  # train.packed: the update's forwards padding-free (rlvr/train/packed.py)
    mask_truncated: bool  # algo.mask_truncated: truncated completions left out of the batch's trained tokens
    advantages: AdvantageSettings  # algo.adv_estimator and its knobs
    kl: KLSettings  # algo.beta, algo.kl_in, algo.kl_estimator
    policy_loss: str  # algo.policy_loss: the registry's objective
    objective_knobs: NoKnobs  # its knobs as configured: every one read from the algo section (Objective.knobs_from)
    clip_low: float  # algo.clip_low, algo.clip_high, algo.dual_clip: the clipped surrogate's bounds
    clip_high: float
    dual_clip: float | None
    ratio_level: str  # algo.ratio_level
    aggregation: str  # algo.aggregation
    norm_length: int  # algo.norm_length, else rollout.max_new_tokens: seq-mean-token-sum-norm's divisor
    # (mode, C_min, C_max) of the sampler correction: algo.sampler_correction, whose auto is rollout.tis_cap as
    # resolved (rlvr.rollout.engines.tis_cap_of): token_truncate at the cap, or off
    sampler: tuple[str, float, float | None]
    off_policy_mask_threshold: float | None  # algo.off_policy_mask_threshold
    top_entropy_quantile: float  # algo.top_entropy_quantile
    entropy: EntropySettings  # the entropy bonus and its adaptive controller
    value_coef: float  # algo.value_coef, algo.value_clip: PPO's value loss
    value_clip: float
    iterations: int  # algo.iterations: optimizer steps per batch
    max_grad_norm: float  # optimizer.max_grad_norm (0: no clip)
    micro_batch_prompts: int  # optimizer.micro_batch_prompts, optimizer.micro_batch_tokens
    micro_batch_tokens: int
    ref_sync_every: int  # algo.ref_sync_every, algo.ref_mixup: the reference moved toward the policy
    ref_mixup: float


def micro_batches(batch: Batch, s: UpdateSettings) -> list[tuple[list[list[int]], slice, int]]:
    """The update's micro-batches (optimizer.micro_batch_prompts, optimizer.micro_batch_tokens): see
    _micro_batches."""
    return _micro_batches(batch, s.micro_batch_prompts, s.micro_batch_tokens, s.packed)


def _micro_batches(batch: Batch, prompts_per_mb: int, tokens_per_mb: int = 0, packed: bool = False
                   ) -> list[tuple[list[list[int]], slice, int]]:
    """(prompts, row slice, width): whole groups, each micro-batch trimmed to its longest completion.

    With tokens_per_mb > 0, consecutive groups are added while the tokens the micro-batch's forward holds
    stay within the budget: its padded size under the shared-prefix forward (n prompts x longest prompt +
    n * G x longest completion), its real tokens packed (train.packed: every row's prompt + completion, the
    rows layout's count, the larger of rlvr.train.packed's two); a group larger than the budget goes alone.
    """
    g, n_prompts = batch.group_size, len(batch.prompts)
    widths = row_widths(batch.present).view(n_prompts, g)  # [P, G]
    lengths = widths.amax(-1).clamp(min=1).tolist()  # [P]
    if packed:  # each group's packed tokens (rlvr.train.packed.pack): prompt + width - 1 per row with a token
        real = [sum(len(p) + w - 1 for w in row if w) for p, row in zip(batch.prompts, widths.tolist())]

    def tokens(a: int, b: int) -> float:  # groups a..b-1 as one micro-batch
        if packed:
            return sum(real[a:b])
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


def reference_forward(ref: Reference | None, batch: Batch, s: UpdateSettings) -> torch.Tensor | None:
    """The reference's log-probs [B, Tc] for the KL term (zero past each micro-batch's width), or None
    without one (no reference, or beta 0). The KL in the loss is compared with the update's forwards, so
    the reference runs over the same micro-batches, trimmed to the same widths; the KL in the reward with
    old_policy_forward's, over the whole batch. Its precision: rlvr.train.forward.reference_precision."""
    kl = s.kl
    if ref is None or kl.beta <= 0:
        return None
    ids, mask = batch.completion_ids, batch.completion_mask
    pieces = micro_batches(batch, s) if kl.kl_in == "loss" else [(batch.prompts, slice(None), ids.shape[1])]
    precision = reference_precision(kl.kl_in, s.mixed_precision)
    out = torch.zeros(ids.shape, device=ids.device)
    for prompts, sl, w in pieces:
        out[sl, :w] = reference_logprobs(ref, prompts, ids[sl, :w], mask[sl, :w], batch.group_size, s.pad_id,
                                         s.temperature, env_mask=_cut(batch.env_mask, sl, w), precision=precision,
                                         packed=s.packed)
    return out


def _token_weights(batch: Batch, s: UpdateSettings, sl: slice, w: int, logp, old, adv, mask, entropy):
    """(sampler weights [b, w] or None, 0/1 token selection [b, w] or None, the high-entropy selection
    alone [b, w] or None, metric counts): the sampler correction against batch.sampler_logp, the
    off-policy sequence mask, the high-entropy selection."""
    mode, c_min, c_max = s.sampler
    sampler_logp = batch.sampler_logp[sl, :w] if batch.sampler_logp is not None else None
    n_tok, n_seq = mask.sum(), (mask.sum(-1) > 0).sum()
    counts, sampler_w, keep, chosen = {}, None, None, None
    if mode != "off" and sampler_logp is not None:  # the sampler (e.g. vLLM) is not exactly the trainer
        sampler_w, stats = sampler_weights(old, sampler_logp, mask, mode, c_min, c_max)
        counts = {k: stats[k] * (n_seq if k in WEIGHT_SEQ_COUNTS else n_tok) for k in stats}
    if s.off_policy_mask_threshold is not None:
        behaviour = sampler_logp if sampler_logp is not None else old
        keep = off_policy_mask(logp, behaviour, adv, mask, s.off_policy_mask_threshold).expand_as(mask)  # [b, w]
        counts["off_policy/masked_seq_frac"] = ((keep == 0) & mask.bool()).any(-1).sum()
    if s.top_entropy_quantile < 1:
        chosen = high_entropy_mask(entropy, mask, s.top_entropy_quantile).to(mask.dtype)  # [b, w]
        keep = chosen if keep is None else keep * chosen
        counts["entropy/selected_frac"] = chosen.sum()
    return sampler_w, keep, chosen, counts


def _buckets(policy) -> int:
    """Forward calls a micro-batch's completions may take. Under FSDP every rank must run the same
    collectives (each sharded layer all-gathers per call), so one call, whatever this rank's lengths."""
    return 1 if dd.is_fsdp(policy) else MAX_BUCKETS


def _micro_loss(policy, batch: Batch, s: UpdateSettings, mb, old_logp, ref_logp, critic, units: dict,
                coef: float, generator: torch.Generator):
    """Forward one micro-batch. Its loss is already divided by the whole batch's units, so the
    micro-batches' losses (and gradients) sum to the batch's. Returns (new log-probs [b, w] detached,
    loss, sums: token-weighted sums of the metrics, extremes: ratio min and max). coef: the entropy bonus's;
    generator: the objective's draws (Clip-Cov's picks)."""
    prompts, sl, w = mb
    norm = s.norm_length or batch.completion_ids.shape[1]
    mask = batch.completion_mask[sl, :w]  # [b, w]
    device = batch.completion_ids.device
    with autocast(device, s.mixed_precision):
        out = completion_forward(policy, prompts, batch.completion_ids[sl, :w], mask, batch.group_size, s.pad_id,
                                 s.temperature, entropy=True, entropy_grad=coef != 0,
                                 env_mask=_cut(batch.env_mask, sl, w), fused_head=use_fused_head(s.lm_head, device),
                                 max_buckets=_buckets(policy), packed=s.packed)
        values = critic(out.hidden).squeeze(-1).float() if critic is not None else None  # [b, w]
    logp = out.logp  # [b, w]
    old = logp.detach() if old_logp is None else old_logp  # the first pass is the behaviour policy
    adv = _cut(batch.advantages, sl, w)
    sampler_w, keep, chosen, counts = _token_weights(batch, s, sl, w, logp, old, adv, mask, out.entropy)
    policy_units = units["policy"]
    loss, stats = policy_loss(logp, old, adv, mask, s.clip_low, s.clip_high, s.dual_clip, s.ratio_level,
                              s.aggregation, norm, policy_units, objective=s.policy_loss, sampler_w=sampler_w,
                              keep=keep, params=s.objective_knobs, generator=generator)
    n_tok = mask.sum()  # sums stay tensors: the host reads them once per pass (_backward)
    sums = {**{k: stats[k] * n_tok for k in TOKEN_MEANS}, **counts}
    # the tokens the entropy bonus acts on and the adaptive control watches: TRL's effective mask, the real
    # tokens of the high-entropy selection (the off-policy mask drops sequences from the policy term only)
    watched = mask if chosen is None else mask * chosen
    sums["entropy"] = (out.entropy.detach() * mask).sum()
    sums["entropy/trained_sum"], sums["entropy/trained_n"] = (out.entropy.detach() * watched).sum(), watched.sum()
    if ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, s.kl.estimator)  # [b, w]
        loss = loss + s.kl.loss_beta * aggregate(kl, mask, s.aggregation, norm, policy_units)
        sums["kl"] = (kl.detach() * mask).sum()
    if coef != 0:
        loss = loss - coef * entropy_bonus(out.entropy, mask, chosen, s.aggregation, norm, policy_units)
    if values is not None:  # a token mean over the whole batch, whatever the policy's aggregation
        v_loss = value_loss(values, _cut(batch.old_values, sl, w), _cut(batch.returns, sl, w), mask, s.value_clip,
                            units["tokens"])
        loss = loss + s.value_coef * v_loss
        sums["value_loss"] = v_loss.detach()  # already a share of the batch's mean
    real = n_tok > 0  # a micro-batch without real tokens has no ratio extremes
    extremes = {"ratio/min": torch.where(real, stats["ratio/min"], math.inf),
                "ratio/max": torch.where(real, stats["ratio/max"], -math.inf)}
    return logp.detach(), loss, sums, extremes


def _logp_mismatch(new_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, max) of |trainer - sampler| log-prob over real tokens of one micro-batch, as tensors."""
    diff = (new_logp - sampler_logp).abs() * mask  # [b, w]
    return diff.sum(), diff.amax() if diff.numel() else diff.new_zeros(())


def _batch_units(mask: torch.Tensor, aggregation: str, dist: dd.Dist) -> dict[str, float]:
    """What the whole (global) batch's losses divide by: the policy aggregation's units, real tokens and
    sequences with one."""
    return dd.allreduce_scalars({"policy": float(loss_units(mask, aggregation)), "tokens": float(mask.sum()),
                                 "seqs": float((mask.sum(-1) > 0).sum())}, dist)


def _weight_metrics(sums: dict, units: dict, s: UpdateSettings, sampled: bool) -> dict[str, float]:
    """The token weights' metrics that this run's settings produce, as shares of real tokens / sequences."""
    on = []
    if sampled and s.sampler[0] != "off":
        on += [k for k in (*WEIGHT_TOKEN_COUNTS, *WEIGHT_SEQ_COUNTS) if k.startswith("sampler/")]
    if s.off_policy_mask_threshold is not None:
        on.append("off_policy/masked_seq_frac")
    if s.top_entropy_quantile < 1:
        on.append("entropy/selected_frac")
    return {k: sums[k] / max(units["seqs" if k in WEIGHT_SEQ_COUNTS else "tokens"], 1.0) for k in on}


def _metrics(sums: dict, extremes: dict, n_tok: float, want_ref: bool, critic) -> dict[str, float]:
    """One pass's metrics from its global sums: token means, the KL only with a reference, the value
    loss only with a critic; ratio min / max over the real tokens (1.0 when there are none)."""
    per_token = lambda k: sums[k] / max(n_tok, 1.0)
    m = {"loss": sums["loss"], "kl": per_token("kl") if want_ref else None, "entropy": per_token("entropy"),
         **{k: per_token(k) for k in TOKEN_MEANS}}
    if n_tok == 0:  # no trained token anywhere: the ratio statistics are 1, as policy_loss gives them
        m["ratio/mean"] = 1.0
    m["ratio/min"] = extremes.get("ratio/min", 1.0)
    m["ratio/max"] = extremes.get("ratio/max", 1.0)
    if critic is not None:
        m["value_loss"] = sums["value_loss"]
    return m


def _untrained(batch: Batch, mbs) -> list[bool]:
    """For each micro-batch, whether it holds no trained token (every completion of it truncated under
    algo.mask_truncated, or dropped): one host read for all of them."""
    if not mbs:
        return []
    counts = torch.stack([batch.completion_mask[sl, :w].sum() for _, sl, w in mbs])
    return (counts == 0).tolist()


def _placeholder_backward(policy, batch: Batch, s: UpdateSettings, mb) -> None:
    """An FSDP rank whose micro-batch holds no trained token still runs the collectives its peers run
    (each sharded module's all-gather in the forward, its reduce-scatter in the backward): the forward
    of two placeholder tokens (the prompt pass and one completion call, as a peer's micro-batch makes)
    and the backward of that at weight 0, so it adds nothing to any gradient. Packed (train.packed), one
    forward call, as a packed peer's micro-batch makes."""
    prompts, sl, w = mb
    ids = batch.completion_ids[sl, :2]
    mask = torch.zeros_like(ids, dtype=batch.completion_mask.dtype)
    mask[0] = 1.0
    with autocast(batch.completion_ids.device, s.mixed_precision):
        out = completion_forward(policy, prompts, ids, mask, batch.group_size, s.pad_id, s.temperature,
                                 max_buckets=1, packed=s.packed)
    (out.logp.sum() * 0.0).backward()


def _backward(policy, batch: Batch, s: UpdateSettings, mbs, old_logp: list, ref_logp: list, critic, units: dict,
              compare: bool, untrained: list[bool], coef: float, generator: torch.Generator
              ) -> tuple[dict[str, float], float, float, float]:
    """Forward and backward every micro-batch (gradients accumulate); the first pass fills old_logp.
    A micro-batch with no trained token has no loss: it is skipped (an FSDP rank runs the placeholder's
    collectives instead), so a step whose every completion was left out trains nothing and fails nothing.
    Returns this rank's sums (loss, token-weighted metrics, sampler mismatch when `compare`), the ratio's
    min and max, and the largest sampler mismatch. They accumulate as tensors on the policy's device and
    the host reads them once, after the last micro-batch."""
    keys = ("loss", "kl", "entropy", "value_loss", "mismatch", "entropy/trained_sum", "entropy/trained_n",
            *TOKEN_MEANS, *WEIGHT_TOKEN_COUNTS, *WEIGHT_SEQ_COUNTS)
    zero = batch.completion_mask.new_zeros(())
    sums = dict.fromkeys(keys, zero)
    low, high, peak = zero + math.inf, zero - math.inf, zero
    sharded = dd.is_fsdp(policy)
    for k, (prompts, sl, w) in enumerate(mbs):
        if untrained[k]:
            if sharded:
                _placeholder_backward(policy, batch, s, (prompts, sl, w))
            continue
        logp, loss, part, extremes = _micro_loss(policy, batch, s, (prompts, sl, w), old_logp[k], ref_logp[k],
                                                 critic, units, coef, generator)
        if old_logp[k] is None:
            old_logp[k] = logp
        loss.backward()
        part["loss"] = loss.detach()
        if compare and batch.sampler_logp is not None:
            part["mismatch"], mb_peak = _logp_mismatch(logp, batch.sampler_logp[sl, :w],
                                                       batch.completion_mask[sl, :w])
            peak = torch.maximum(peak, mb_peak)
        for key, v in part.items():
            sums[key] = sums[key] + v
        low, high = torch.minimum(low, extremes["ratio/min"]), torch.maximum(high, extremes["ratio/max"])
    read = torch.stack([*(sums[key].float() for key in keys), low, high, peak]).tolist()  # one host read
    return dict(zip(keys, read[:len(keys)])), read[-3], read[-2], read[-1]


def policy_update(policy, optimizer, batch: Batch, s: UpdateSettings, ref_logp: torch.Tensor | None = None,
                  critic=None, dist: dd.Dist = dd.Dist(), entropy: EntropyState | None = None, seed: int = 0
                  ) -> dict[str, float]:
    """Clipped-surrogate update (+ loss beta * KL to the reference, whose log-probs `ref_logp` [B, Tc] are
    reference_forward's, + entropy bonus, + value loss of `critic`, a head on the policy's hidden states):
    one forward and backward per micro-batch, algo.iterations times. Returns the last pass's metrics as
    floats.

    The entropy bonus's coefficient is `entropy`'s (the adaptive controller's state; None: its start,
    algo.entropy_coef); with a bonus or the controller on, the metrics hold the coefficient applied
    (entropy/coef) and the mean entropy of the tokens it watched (entropy/watched_mean), from which the
    caller steps the state (EntropyState.after).

    Old log-probs are the policy's own on the first pass (ratio 1 there); with batch.sampler_logp, that
    first pass is compared with the sampler's in rollout/logp_mismatch_*. A step whose loss or gradient
    is not finite is skipped (no optimizer step) and counted in skipped_updates; so is one whose step made
    a weight non-finite (undone: rlvr.train.optim.step_keeping_finite), also in skipped_nonfinite_weights.

    A micro-batch with no trained token (algo.mask_truncated on completions all truncated) skips its
    forward and backward, counted in untrained_micro_batches; with none anywhere the step leaves the
    weights as they are (no gradient: AdamW moves no parameter) and grad_norm is 0.

    Every micro-batch's loss is divided by the units of the whole batch (`aggregate`'s units), summed
    over ranks under torch.distributed (`dist`, where `batch` is this rank's shard of whole groups), and
    gradients are summed over micro-batches and ranks: the step equals one process on the whole batch
    in one pass, and so do the returned metrics.

    The update's random draws (Clip-Cov's picks, dropout masks such as LoRA's) come from generators seeded
    `seed` (rlvr.rollout.sampling.update_seed), never from the global RNG, which a collecting thread may be
    drawing from meanwhile (rollout.overlap=one_step_off with the HF engine).
    """
    coef = (entropy or EntropyState(s.entropy.coef)).applied(s.entropy)
    mbs = micro_batches(batch, s)
    units = _batch_units(batch.completion_mask, s.aggregation, dist)
    want_ref = s.kl.loss_beta > 0 and ref_logp is not None
    ref_logp = [ref_logp[sl, :w] if want_ref else None for _, sl, w in mbs]
    old_logp: list[torch.Tensor | None] = [None] * len(mbs)
    untrained = _untrained(batch, mbs)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    seeded_dropouts(policy, seed)
    generator = torch.Generator().manual_seed(seed)  # host-side: Clip-Cov draws its picks on the host
    metrics: dict[str, float] = {}
    skipped = undone = 0
    for it in range(s.iterations):
        optimizer.zero_grad(set_to_none=True)
        sums, low, high, peak = _backward(policy, batch, s, mbs, old_logp, ref_logp, critic, units, it == 0,
                                          untrained, coef, generator)
        dd.allreduce_gradients(params, dist)
        limit = s.max_grad_norm if s.max_grad_norm > 0 else math.inf
        grad_norm = (dd.clip_grad_norm(params, limit, dist) if dist.enabled
                     else float(torch.nn.utils.clip_grad_norm_(params, limit)))
        # global sums before the finite check, so every rank makes the same decision
        sums = dd.allreduce_scalars(sums, dist)
        low = dd.allreduce_scalars({"r": low}, dist, "min")["r"]
        top = dd.allreduce_scalars({"r": high, "m": peak}, dist, "max")
        if math.isfinite(grad_norm) and math.isfinite(sums["loss"]):
            if not step_keeping_finite(optimizer, params, dist):  # finite gradient, weights overflowed: undone
                skipped += 1
                undone += 1
        else:  # a non-finite step would poison the weights: skip it and say so in the metrics
            skipped += 1
            optimizer.zero_grad(set_to_none=True)
        extremes = {k: v for k, v in (("ratio/min", low), ("ratio/max", top["r"])) if math.isfinite(v)}
        metrics.update(_metrics(sums, extremes, units["tokens"], want_ref, critic), grad_norm=grad_norm)
        metrics.update(_weight_metrics(sums, units, s, batch.sampler_logp is not None))
        if it == 0 and batch.sampler_logp is not None:
            metrics["rollout/logp_mismatch_mean_abs"] = sums["mismatch"] / max(units["tokens"], 1.0)
            metrics["rollout/logp_mismatch_max"] = top["m"]
    metrics["skipped_updates"] = skipped
    metrics["skipped_nonfinite_weights"] = undone  # of those, steps undone for the weights they made
    metrics["micro_batches"] = len(mbs)  # forward/backward passes per iteration on this rank
    # of them, those with no trained token, whose backward was skipped (all of them: the step trained nothing)
    metrics["untrained_micro_batches"] = sum(untrained)
    if s.entropy.adaptive or s.entropy.coef != 0:
        metrics["entropy/coef"] = coef  # the coefficient this step applied
        metrics["entropy/watched_mean"] = sums["entropy/trained_sum"] / max(sums["entropy/trained_n"], 1.0)
    optimizer.zero_grad(set_to_none=True)
    return metrics
