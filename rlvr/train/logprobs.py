"""Per-token log-probabilities of completions under a causal LM, sharing each prompt across its group.

The prompt of a group is run once (with gradient) and its KV cache is repeated G times, so the
prompt's cost is paid once per prompt rather than once per completion; the result and its gradient
are the same as running every prompt + completion pair in full (tests/train/test_logprobs.py).
Log-probabilities are computed for real completion tokens only, in chunks, so the [B, T, vocab]
logits are never held at once and padding never reaches the vocabulary projection.

Under gradient checkpointing transformers drops the cache inside checkpointed layers, so each
prompt + completion row is then run in full (same values and gradients, the prompt recomputed G times).
"""
from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from rlvr.models import checkpointing_active, is_peft, unwrap
from rlvr.rollout.engine import left_pad, positions_from_mask


@dataclass
class ForwardOut:
    logp: torch.Tensor  # [B, Tc]
    hidden: torch.Tensor | None = None  # [B, Tc, H] the state each completion token is predicted from
    entropy: torch.Tensor | None = None  # [B, Tc] entropy of the (tempered) next-token distribution


def token_logprobs(hidden: torch.Tensor, head: torch.nn.Module, tokens: torch.Tensor, temperature: float = 1.0,
                   chunk: int = 256, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [N, H] predicts tokens [N]; returns (log p(token) [N] fp32, entropy [N] or None),
    `chunk` rows of logits at a time."""
    out, ent = [], []
    for start in range(0, hidden.shape[0], chunk):
        logits = head(hidden[start:start + chunk]).float()  # [n, V]
        if temperature != 1.0:
            logits = logits / temperature
        logp_all = logits.log_softmax(-1)
        out.append(logp_all.gather(-1, tokens[start:start + chunk, None]).squeeze(-1))  # [n]
        if with_entropy:
            ent.append(-(logp_all.exp() * logp_all).sum(-1))
    if not out:
        empty = hidden.new_zeros(0)
        return empty, (empty if with_entropy else None)
    return torch.cat(out), (torch.cat(ent) if with_entropy else None)


def completion_logprobs(model, prompts: list[list[int]], completion_ids: torch.Tensor,
                        completion_mask: torch.Tensor, group_size: int, pad_id: int,
                        temperature: float = 1.0, with_hidden: bool = False, with_entropy: bool = False):
    """log p(completion token | prompt, earlier tokens): [B, Tc], zero where completion_mask is 0.

    prompts: P token lists; completion_ids, completion_mask: [B, Tc] with B = P * group_size and
    row b continuing prompt b // group_size. With with_hidden or with_entropy, returns a ForwardOut.
    """
    inner = unwrap(model)  # PEFT: the adapters sit inside this model's layers
    base, head = inner.base_model, inner.get_output_embeddings()
    ids, mask = left_pad(prompts, pad_id)  # [P, Tp]
    if checkpointing_active(model):
        hidden = _full_hidden(base, ids, mask, completion_ids, completion_mask, group_size)
    else:
        hidden = _shared_prefix_hidden(base, ids, mask, completion_ids, completion_mask, group_size)
    real = completion_mask.bool()  # only real completion tokens reach the vocabulary projection
    logp, ent = token_logprobs(hidden[real], head, completion_ids[real], temperature, with_entropy=with_entropy)
    logp = torch.zeros(completion_ids.shape, dtype=logp.dtype).masked_scatter(real, logp)  # [B, Tc]
    if not (with_hidden or with_entropy):
        return logp
    if ent is not None:
        ent = torch.zeros(completion_ids.shape, dtype=ent.dtype).masked_scatter(real, ent)
    return ForwardOut(logp, hidden if with_hidden else None, ent)


def _shared_prefix_hidden(base, ids, mask, completion_ids, completion_mask, group_size) -> torch.Tensor:
    """Prompts [P, Tp] run once, their cache repeated G times: the state predicting each completion
    token [B, Tc, H] (token t from position t - 1, token 0 from the prompt's last position)."""
    prompt_out = base(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                      use_cache=True)
    cache = prompt_out.cache
    cache.batch_repeat_interleave(group_size)
    last_prompt_h = prompt_out.last_hidden_state[:, -1:].repeat_interleave(group_size, dim=0)  # [B, 1, H]
    mask = mask.repeat_interleave(group_size, dim=0)  # [B, Tp]
    positions = mask.sum(-1, keepdim=True) + torch.arange(completion_ids.shape[1])[None, :]  # [B, Tc]
    comp_out = base(input_ids=completion_ids,
                    attention_mask=torch.cat([mask, completion_mask.long()], dim=-1),
                    position_ids=positions, cache=cache, use_cache=True)
    return torch.cat([last_prompt_h, comp_out.last_hidden_state[:, :-1]], dim=1)


def _full_hidden(base, ids, mask, completion_ids, completion_mask, group_size) -> torch.Tensor:
    """The same states [B, Tc, H] from one cache-free pass over each left-padded prompt + completion."""
    tp = ids.shape[1]
    full_mask = torch.cat([mask.repeat_interleave(group_size, dim=0), completion_mask.long()], dim=-1)  # [B, T]
    full_ids = torch.cat([ids.repeat_interleave(group_size, dim=0), completion_ids], dim=-1)  # [B, T]
    out = base(input_ids=full_ids, attention_mask=full_mask, position_ids=positions_from_mask(full_mask),
               use_cache=False)
    return out.last_hidden_state[:, tp - 1:tp - 1 + completion_ids.shape[1]]


@dataclass
class Reference:
    """The KL reference policy: a frozen copy of the policy, or (adapters_off, LoRA) the policy itself
    run with its adapters disabled, i.e. the frozen base weights, so no second copy is held."""

    model: torch.nn.Module
    adapters_off: bool = False

    @classmethod
    def of(cls, policy: torch.nn.Module) -> "Reference":
        """The reference for `policy` at its current weights."""
        if is_peft(policy):
            return cls(policy, adapters_off=True)
        return cls(copy.deepcopy(policy).eval().requires_grad_(False))


def reference_logprobs(ref: Reference, prompts: list[list[int]], completion_ids: torch.Tensor,
                       completion_mask: torch.Tensor, group_size: int, pad_id: int,
                       temperature: float = 1.0) -> torch.Tensor:
    """completion_logprobs under the reference, without gradient and in eval mode: [B, Tc]."""
    model, was_training = ref.model, ref.model.training
    model.eval()
    try:
        with torch.no_grad(), (model.disable_adapter() if ref.adapters_off else nullcontext()):
            return completion_logprobs(model, prompts, completion_ids, completion_mask, group_size, pad_id,
                                       temperature)
    finally:
        model.train(was_training)
