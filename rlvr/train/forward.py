"""The forwards a training step runs, each a function with one return type, and the rule for the precision
the reference runs at.

    completion_forward(policy, ...)  -> ForwardOut (log-probs, entropy, hidden states): the update's forward
    completion_logprobs(model, ...)  -> [B, Tc] log-probs: the old policy's, tests', benches'
    reference_logprobs(ref, ...)     -> [B, Tc] log-probs of the KL reference, at `reference_precision`

Per-token log-probabilities of completions under a causal LM share each prompt across its group: the prompt
of a group is run once (with gradient) and its keys / values are shared by its G completions, so the
prompt's cost is paid once per prompt rather than once per completion; the result and its gradient are the
same as running every prompt + completion pair in full (tests/train/test_forward.py). Completions are run
in a few buckets of similar length, each trimmed to its own width (plan_buckets), so the forward and
backward follow the real tokens rather than the longest completion of the micro-batch. Log-probabilities
are computed for real completion tokens only, in chunks, so the [B, T, vocab] logits are never held at once
and padding never reaches the vocabulary projection.

Under gradient checkpointing transformers drops the cache inside checkpointed layers, so each
prompt + completion row is then run in full, bucketed the same way (same values and gradients, the
prompt recomputed G times).

With train.packed the micro-batch runs instead padding-free (rlvr/train/packed.py: one forward call; a row
per group, each prompt once, where the attention takes a 4D mask; one row, each prompt once per completion,
otherwise), and the head scores the same tokens.
"""
from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from rlvr.algo.masks import present_tokens, row_widths
from rlvr.device import autocast
from rlvr.models.checkpointing import checkpointing_active
from rlvr.models.lora import is_peft, unwrap
from rlvr.rollout.decoding import left_pad, positions_from_mask, prefill
from rlvr.rollout.kvcache import cache_arg, cache_out
from rlvr.train.head import token_logprobs
from rlvr.train.packed import pack, packed_hidden, shares_prompts, take_rows

MAX_BUCKETS = 4  # forward calls per micro-batch at most; each runs its rows trimmed to its own width
# What one more forward call costs, in completion positions: each call reads every weight again and
# accumulates every weight gradient again. On CPU (smollm2-135m, bench/train_forward.py) a 4th bucket
# that saved 10 positions cost more than it saved, a 3rd that saved 32 broke even.
BUCKET_OVERHEAD = 32


@dataclass
class ForwardOut:
    logp: torch.Tensor  # [B, Tc]
    entropy: torch.Tensor | None  # [B, Tc] entropy of the (tempered) next-token distribution, when asked for
    hidden: torch.Tensor  # [B, Tc, H] the state each completion token is predicted from (a critic reads it)


def completion_forward(model, prompts: list[list[int]], completion_ids: torch.Tensor,
                       completion_mask: torch.Tensor, group_size: int, pad_id: int, temperature: float = 1.0, *,
                       entropy: bool = False, entropy_grad: bool = False, env_mask: torch.Tensor | None = None,
                       fused_head: bool = False, max_buckets: int = MAX_BUCKETS,
                       bucket_overhead: int = BUCKET_OVERHEAD, packed: bool = False) -> ForwardOut:
    """log p(completion token | prompt, earlier tokens) [B, Tc], zero where completion_mask is 0; with
    `entropy` the next-token entropy [B, Tc] (differentiable only with entropy_grad); the hidden states
    [B, Tc, H] (past a row's real tokens unspecified: zero beyond its bucket's width).
    env_mask [B, Tc] (multi-turn episodes): environment tokens, attended to like the others but never
    scored, so they get no log-prob and no gradient of their own.

    prompts: P token lists; completion_ids, completion_mask: [B, Tc] with B = P * group_size and
    row b continuing prompt b // group_size. Rows run in up to max_buckets length buckets
    (plan_buckets); max_buckets=1 pads every row to the longest. fused_head: token_logprobs' fused path
    (the same values; use_fused_head). packed (train.packed): the rows packed without pads instead
    (rlvr/train/packed.py, in the layout shares_prompts picks; buckets then do not apply), the same values
    within rounding.
    """
    inner = unwrap(model)  # PEFT: the adapters sit inside this model's layers
    base, head = inner.base_model, inner.get_output_embeddings()
    present = present_tokens(completion_mask, env_mask)  # [B, Tc] attended tokens
    if packed:
        hidden = packed_hidden(base, pack(prompts, completion_ids, present, group_size, shares_prompts(model)))
    else:
        ids, mask = left_pad(prompts, pad_id, completion_ids.device)  # [P, Tp]
        plan = plan_buckets(_positions_needed(present), max_buckets, bucket_overhead)
        if checkpointing_active(model):
            pieces = _full_hidden(base, ids, mask, completion_ids, present, group_size, plan)
        else:
            pieces = _shared_prefix_hidden(base, prompts, pad_id, completion_ids, present, group_size, plan)
        hidden = _unsort(pieces, plan, completion_ids.shape[1])  # [B, Tc, H]
    real = completion_mask.bool()  # only real completion tokens reach the vocabulary projection
    logp, ent = token_logprobs(hidden[real], head, completion_ids[real], temperature, with_entropy=entropy,
                               entropy_grad=entropy_grad, fused=fused_head)
    logp = logp.new_zeros(completion_ids.shape).masked_scatter(real, logp)  # [B, Tc]
    if ent is not None:
        ent = ent.new_zeros(completion_ids.shape).masked_scatter(real, ent)
    return ForwardOut(logp, ent, hidden)


def completion_logprobs(model, prompts: list[list[int]], completion_ids: torch.Tensor,
                        completion_mask: torch.Tensor, group_size: int, pad_id: int, temperature: float = 1.0, *,
                        env_mask: torch.Tensor | None = None, max_buckets: int = MAX_BUCKETS,
                        bucket_overhead: int = BUCKET_OVERHEAD, packed: bool = False) -> torch.Tensor:
    """completion_forward's log-probs alone: [B, Tc], zero where completion_mask is 0."""
    return completion_forward(model, prompts, completion_ids, completion_mask, group_size, pad_id, temperature,
                              env_mask=env_mask, max_buckets=max_buckets, bucket_overhead=bucket_overhead,
                              packed=packed).logp


def plan_buckets(lengths: list[int], max_buckets: int = MAX_BUCKETS,
                 bucket_overhead: int = BUCKET_OVERHEAD) -> list[tuple[list[int], int]]:
    """Rows grouped into at most max_buckets buckets [(row indices, width)], width the bucket's longest
    length, minimising the positions computed plus bucket_overhead per bucket:
    sum over buckets of len(rows) * width + bucket_overhead.

    Exact DP over the rows sorted by length: some optimal grouping is contiguous in that order (give the
    narrowest bucket the shortest rows and no bucket widens), and rows of equal length are never split.
    Ties go to fewer buckets (each is one more forward call). Buckets come narrowest first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    s = [lengths[i] for i in order]
    n = len(s)
    if n == 0:
        return []
    cuts = [0] + [i for i in range(1, n) if s[i] != s[i - 1]] + [n]  # bucket edges worth considering
    inf = float("inf")
    best = [{0: 0}] + [{} for _ in range(max_buckets)]  # best[k][j]: min cost of sorted rows :j in k buckets
    back: list[dict] = [{} for _ in range(max_buckets + 1)]
    for k in range(1, max_buckets + 1):
        for j in cuts[1:]:
            for i, prev in best[k - 1].items():
                if i < j and prev + (j - i) * s[j - 1] < best[k].get(j, inf):
                    best[k][j], back[k][j] = prev + (j - i) * s[j - 1], i
    k = min((k for k in range(1, max_buckets + 1) if n in best[k]), key=lambda k: (best[k][n] + k * bucket_overhead, k))
    plan, j = [], n
    while k > 0:
        i = back[k][j]
        plan.append((order[i:j], s[j - 1]))
        j, k = i, k - 1
    return plan[::-1]


def _positions_needed(present: torch.Tensor) -> list[int]:
    """Completion positions each row must run, [B] ints: all but its last real token, whose output
    predicts nothing (token 0 is predicted from the prompt)."""
    return (row_widths(present) - 1).clamp(min=0).tolist()


def _prompt_pass(base, prompts: list[list[int]], pad_id: int):
    """Run the prompts once, with gradient (rlvr.rollout.decoding.prefill on the trunk): (per-layer keys /
    values [P, heads, Tp, d], the last prompt state [P, 1, H], the attention mask [P, Tp])."""
    out, mask = prefill(base, prompts, pad_id)
    return [(layer.keys, layer.values) for layer in cache_out(out).layers], out.last_hidden_state[:, -1:], mask


def _shared_prefix_hidden(base, prompts, pad_id, completion_ids, completion_mask, group_size,
                          plan) -> list[torch.Tensor]:
    """Prompts run once (_prompt_pass); each bucket of the plan then runs its completions [r, width]
    trimmed to its width on a cache of its rows' prompt keys / values (row b reads prompt b // G;
    autograd sums the buckets' gradients into the one prompt pass). Returns per bucket the states
    [r, 1 + width, H] predicting completion tokens 0..width (token t from position t - 1, token 0 from
    the prompt's last)."""
    kv, last_h, mask = _prompt_pass(base, prompts, pad_id)
    prompt_len = mask.sum(-1)  # [P]
    pieces = []
    for rows, width in plan:
        rows = torch.tensor(rows, device=completion_ids.device)
        src = rows // group_size  # [r]
        if width == 0:  # every row has at most one token: the prompt predicts it
            pieces.append(take_rows(last_h, src))
            continue
        cache = DynamicCache(ddp_cache_data=[(take_rows(k, src), take_rows(v, src)) for k, v in kv],
                             config=base.config)
        comp_out = base(input_ids=completion_ids[rows, :width],
                        attention_mask=torch.cat([mask[src], completion_mask[rows, :width].long()], dim=-1),
                        position_ids=prompt_len[src, None] + torch.arange(width, device=rows.device)[None, :],
                        use_cache=True, **cache_arg(cache))
        pieces.append(torch.cat([take_rows(last_h, src), comp_out.last_hidden_state], dim=1))  # [r, 1 + width, H]
    return pieces


def _full_hidden(base, ids, mask, completion_ids, completion_mask, group_size, plan) -> list[torch.Tensor]:
    """The same per-bucket states [r, 1 + width, H] from one cache-free pass per bucket over each
    left-padded prompt + its completion trimmed to the bucket's width."""
    tp = ids.shape[1]
    pieces = []
    for rows, width in plan:
        rows = torch.tensor(rows, device=completion_ids.device)
        src = rows // group_size  # [r]
        full_mask = torch.cat([mask[src], completion_mask[rows, :width].long()], dim=-1)  # [r, Tp + width]
        full_ids = torch.cat([ids[src], completion_ids[rows, :width]], dim=-1)  # [r, Tp + width]
        out = base(input_ids=full_ids, attention_mask=full_mask, position_ids=positions_from_mask(full_mask),
                   use_cache=False)
        pieces.append(out.last_hidden_state[:, tp - 1:])
    return pieces


def _unsort(pieces: list[torch.Tensor], plan, tc: int) -> torch.Tensor:
    """Bucket states zero-padded to Tc and put back in row order: [B, Tc, H]."""
    padded = [F.pad(p[:, :tc], (0, 0, 0, tc - min(p.shape[1], tc))) for p in pieces]
    order = torch.tensor([b for rows, _ in plan for b in rows], device=pieces[0].device)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=order.device)
    return take_rows(torch.cat(padded), inverse)


@dataclass
class Reference:
    """The KL reference policy: a frozen copy of the policy, or (adapters_off, LoRA) the policy itself
    run with its adapters disabled, i.e. the frozen base weights, so no second copy is held. bf16: the
    copy's linear layers are bf16 (rlvr.rollout.quant's bf16 rollout copy), half an fp32 copy's memory;
    under bf16 autocast its log-probs are an fp32 copy's exactly, since autocast multiplies by those very
    bf16 values (on the CPU at tiny shapes the KL per token was equal to the last bit, where a whole model
    cast to bf16 moved it by up to 8.5e-4 against a mean KL of 8.6e-4)."""

    model: torch.nn.Module
    adapters_off: bool = False
    bf16: bool = False

    @classmethod
    def of(cls, policy: torch.nn.Module, bf16: bool = False) -> "Reference":
        """The reference for `policy` at its current weights, a bf16 copy with `bf16` (see the class)."""
        if is_peft(policy):
            return cls(policy, adapters_off=True)
        if bf16:
            from rlvr.rollout.quant import rollout_copy

            return cls(rollout_copy(policy, "bf16"), bf16=True)
        return cls(copy.deepcopy(policy).eval().requires_grad_(False))

    def sync(self, policy: torch.nn.Module, mixup: float) -> None:
        """ref <- mixup * policy + (1 - mixup) * ref (algo.ref_sync_every); the frozen base of a LoRA
        policy (adapters_off) never moves; a bf16 copy is only ever replaced (mixup 1: reference_in_bf16)."""
        if self.adapters_off:
            return
        if self.bf16:
            from rlvr.rollout.quant import refresh

            if mixup != 1.0:
                raise ValueError(f"a bf16 reference is replaced, not mixed (ref_mixup {mixup}): reference_in_bf16")
            refresh(self.model, policy)
            return
        with torch.no_grad():
            for p_ref, p in zip(self.model.parameters(), policy.parameters()):
                p_ref.mul_(1 - mixup).add_(p.detach(), alpha=mixup)


def reference_precision(kl_in: str, precision: str) -> str:
    """The precision the reference's forward runs at: that of the policy forward its log-probs are compared
    with, so the KL is exactly 0 at equal weights. The KL in the loss compares with the update's forward,
    at train.mixed_precision (`precision`); the KL in the reward with the old policy's forward before the
    update, which runs in fp32 ("no"): a bf16 forward's rounding would be a KL of its own, a hidden length
    penalty in the reward."""
    return precision if kl_in == "loss" else "no"


def reference_in_bf16(algo, precision: str) -> bool:
    """Hold the reference as a bf16 copy (Reference): where its forward runs under bf16 autocast
    (reference_precision) and it is only ever replaced whole (no algo.ref_mixup below 1)."""
    return (reference_precision(algo.kl_in, precision) == "bf16"
            and (algo.ref_sync_every == 0 or algo.ref_mixup == 1.0))


def reference_logprobs(ref: Reference, prompts: list[list[int]], completion_ids: torch.Tensor,
                       completion_mask: torch.Tensor, group_size: int, pad_id: int, temperature: float = 1.0, *,
                       env_mask: torch.Tensor | None = None, precision: str = "no", packed: bool = False
                       ) -> torch.Tensor:
    """completion_logprobs under the reference, without gradient, in eval mode and at `precision`
    (reference_precision's answer), packed like the forward it is compared with: [B, Tc]."""
    model, was_training = ref.model, ref.model.training
    model.eval()
    try:
        with torch.no_grad(), (model.disable_adapter() if ref.adapters_off else nullcontext()), \
                autocast(completion_ids.device, precision):
            return completion_logprobs(model, prompts, completion_ids, completion_mask, group_size, pad_id,
                                       temperature, env_mask=env_mask, packed=packed)
    finally:
        model.train(was_training)
