"""Per-token log-probabilities of completions under a causal LM, sharing each prompt across its group.

The prompt of a group is run once (with gradient) and its KV cache is repeated G times, so the
prompt's cost is paid once per prompt rather than once per completion; the result and its gradient
are the same as running every prompt + completion pair in full (tests/train/test_logprobs.py).
Log-probabilities are computed for real completion tokens only, in chunks, so the [B, T, vocab]
logits are never held at once and padding never reaches the vocabulary projection.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

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
    base, head = model.base_model, model.get_output_embeddings()
    ids, mask = left_pad(prompts, pad_id)  # [P, Tp]
    prompt_out = base(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                      use_cache=True)
    cache = prompt_out.cache
    cache.batch_repeat_interleave(group_size)
    last_prompt_h = prompt_out.last_hidden_state[:, -1:].repeat_interleave(group_size, dim=0)  # [B, 1, H]
    mask = mask.repeat_interleave(group_size, dim=0)  # [B, Tp]
    tc = completion_ids.shape[1]
    positions = mask.sum(-1, keepdim=True) + torch.arange(tc)[None, :]  # [B, Tc]
    comp_out = base(input_ids=completion_ids,
                    attention_mask=torch.cat([mask, completion_mask.long()], dim=-1),
                    position_ids=positions, cache=cache, use_cache=True)
    # Token t is predicted from position t - 1; token 0 from the prompt's last position.
    hidden = torch.cat([last_prompt_h, comp_out.last_hidden_state[:, :-1]], dim=1)  # [B, Tc, H]
    real = completion_mask.bool()  # only real completion tokens reach the vocabulary projection
    logp, ent = token_logprobs(hidden[real], head, completion_ids[real], temperature, with_entropy=with_entropy)
    logp = torch.zeros(completion_ids.shape, dtype=logp.dtype).masked_scatter(real, logp)  # [B, Tc]
    if not (with_hidden or with_entropy):
        return logp
    if ent is not None:
        ent = torch.zeros(completion_ids.shape, dtype=ent.dtype).masked_scatter(real, ent)
    return ForwardOut(logp, hidden if with_hidden else None, ent)
