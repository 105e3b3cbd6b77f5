"""The built-in engine's pieces: the Rollout, prefill with a shared prompt prefix, and the decode loop.

Every rollout of the built-in engine, single-turn or multi-turn, in training, evaluation and the
benchmarks, goes through `rlvr.rollout.builtin.BuiltinSession` (`builtin.generate` is its single
turn): the prompts are prefilled once (a prefix common to all of them once more, `prefill`), each
row's cache is gathered into buffers with room for the turn, and `decode` samples until every row
stops. On the CPU finished rows leave the batch each step; on CUDA the loop runs over static buffers
replayed as a CUDA graph (rlvr/rollout/graphed.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo.masks import present_tokens
from rlvr.device import of_model
from rlvr.rollout import graphed, lean
from rlvr.rollout.kvcache import cache_arg, cache_out
from rlvr.rollout.sampling import sample_next


@dataclass(kw_only=True)
class Rollout:
    """G sampled completions for each of P prompts; row b belongs to prompt b // G."""

    prompt_ids: list[list[int]]  # P token-id lists, unpadded
    completion_ids: torch.Tensor  # [B, Tc] right-padded with pad_id, B = P * G
    completion_mask: torch.Tensor  # [B, Tc] 1.0 on generated tokens (the stop token included)
    sampler_logp: torch.Tensor  # [B, Tc] log-prob of each token under the sampling distribution
    truncated: torch.Tensor  # [B] bool: hit max_new_tokens without a stop token (episodes: did not end done)
    group_size: int
    env_mask: torch.Tensor | None = None  # [B, Tc] 1.0 on environment tokens (multi-turn): context, not loss

    @property
    def present(self) -> torch.Tensor:
        """[B, Tc] 1.0 on every real token after the prompt, the model's and the environment's."""
        return present_tokens(self.completion_mask, self.env_mask)

    def to(self, device: torch.device) -> "Rollout":
        """The same rollout with its tensors on `device`: the one host-to-device crossing of a training
        batch (rlvr.train.batch.make_batch). Rollouts live on the host until then, so that scoring, logging
        and gathering across ranks read plain memory."""
        move = lambda x: None if x is None else x.to(device, non_blocking=True)
        return Rollout(prompt_ids=self.prompt_ids, completion_ids=move(self.completion_ids),
                       completion_mask=move(self.completion_mask), sampler_logp=move(self.sampler_logp),
                       truncated=move(self.truncated), group_size=self.group_size, env_mask=move(self.env_mask))

    def completion_token_lists(self) -> list[list[int]]:
        lengths = self.present.sum(-1).long().tolist()
        return [row[:n] for row, n in zip(self.completion_ids.tolist(), lengths)]


def select_groups(r: Rollout, groups: list[int]) -> Rollout:
    """The rollout restricted to the given prompt groups, in that order."""
    g = r.group_size
    rows = torch.tensor([i * g + j for i in groups for j in range(g)], dtype=torch.long)
    return Rollout(prompt_ids=[r.prompt_ids[i] for i in groups], completion_ids=r.completion_ids[rows],
                   completion_mask=r.completion_mask[rows],
                   sampler_logp=r.sampler_logp[rows], truncated=r.truncated[rows], group_size=g,
                   env_mask=None if r.env_mask is None else r.env_mask[rows])


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """Stack rollouts of one group size, right-padding to the widest."""
    width = max(p.completion_ids.shape[1] for p in parts)
    pad = lambda x, v: torch.nn.functional.pad(x, (0, width - x.shape[1]), value=v)
    env = None
    if any(p.env_mask is not None for p in parts):
        env = torch.cat([pad(torch.zeros_like(p.completion_mask) if p.env_mask is None else p.env_mask, 0.0)
                         for p in parts])
    return Rollout(prompt_ids=[ids for p in parts for ids in p.prompt_ids],
                   completion_ids=torch.cat([pad(p.completion_ids, pad_id) for p in parts]),
                   completion_mask=torch.cat([pad(p.completion_mask, 0.0) for p in parts]),
                   sampler_logp=torch.cat([pad(p.sampler_logp, 0.0) for p in parts]),
                   truncated=torch.cat([p.truncated for p in parts]), group_size=parts[0].group_size, env_mask=env)


def left_pad(seqs: list[list[int]], pad_id: int, device: torch.device | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists: returns (ids [N, T], mask [N, T]) with mask 1 on real tokens, built on the
    host and moved to `device` in one copy each."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return (ids, mask) if device is None else (ids.to(device), mask.to(device))


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: [N, T] -> [N, T]."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with (the system prompt and few-shot turns, as a rule)."""
    n = min(len(p) for p in prompts)
    first = prompts[0]
    for other in prompts[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return n


def prefill(model, prompts: list[list[int]], pad_id: int, min_shared: int = 8, **kwargs):
    """Run the prompts once with a cache: returns (the model's output, attention mask [P, Tp]). A prefix
    common to all prompts (system prompt, few-shot turns) is run once and its cache shared, then the
    rest of each prompt runs after it, left-padded, so padding sits between prefix and rest (masked
    out; the positions skip it). Every prompt keeps at least its last token in the second pass.
    `model` is a causal LM (rollouts: kwargs logits_to_keep=1) or its trunk (the training forward,
    rlvr/train/forward.py, which reads the cache and the last hidden state, with gradient)."""
    device = of_model(model)
    shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1) if len(prompts) > 1 else 0
    if shared < min_shared:
        ids, mask = left_pad(prompts, pad_id, device)  # [P, Tp]
        return model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), use_cache=True,
                     **kwargs), mask
    head = model(input_ids=torch.tensor([prompts[0][:shared]], device=device), use_cache=True, **kwargs)
    cache = cache_out(head)
    cache.batch_repeat_interleave(len(prompts))
    ids, rest_mask = left_pad([p[shared:] for p in prompts], pad_id, device)  # [P, Tr]
    mask = torch.cat([torch.ones(len(prompts), shared, dtype=torch.long, device=device), rest_mask], dim=-1)  # [P, Tp]
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)[:, shared:],
                use_cache=True, **cache_arg(cache), **kwargs)
    return out, mask


def decode(model, cache, logits: torch.Tensor, mask: torch.Tensor, next_pos: torch.Tensor, u: torch.Tensor | None,
           caps: torch.Tensor, temperature: float, top_p: float, top_k: int, stop_ids: list[int], pad_id: int,
           park=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample every row until it draws a stop token or reaches its cap. logits [A, V]: each row's
    next-token logits; mask [A, L]: attention over the cache; next_pos [A, 1]; u [A, T] draws (None:
    greedy); caps [A] tokens allowed per row (on the host), T = caps.max(). Finished rows leave the batch;
    with `park`, park(rows, kv, mask, next_pos) first gets their cache (per layer (keys, values)
    [r, H, L, D]), which a multi-turn session keeps for the next turn (rlvr/rollout/builtin.py). Returns
    tokens [A, T] (pad_id after a row's end) and their sampler log-probs [A, T], on the model's device.
    Tensors live where the logits are; the host reads one number per token (how many rows finished),
    which dropping finished rows needs."""
    if park is None and graphed.enabled(model):  # static buffers, a CUDA graph on a GPU (rollout.cuda_graph)
        return graphed.decode_graphed(model, cache, logits, mask, next_pos, u, caps, temperature, top_p, top_k,
                                      stop_ids, pad_id)
    device = logits.device
    n, width = logits.shape[0], int(caps.max()) if len(caps) else 0
    tokens_out = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    logp_out = torch.zeros((n, width), device=device)
    active = torch.arange(n, device=device)  # rows of the batch that are still generating
    caps = caps.to(device)

    stop = torch.tensor(stop_ids, dtype=torch.long, device=device)
    fast = lean.is_compiled(model)  # a rollout copy with rollout.compile: its compiled layers (rlvr/rollout/lean.py)
    for t in range(width):
        tok, logp = sample_next(logits, temperature, top_p, top_k, None if u is None else u[active, t])  # [A]
        tokens_out[active, t] = tok
        logp_out[active, t] = logp
        finished = torch.isin(tok, stop) | (caps[active] <= t + 1)  # [A]
        n_done = int(finished.sum())  # the loop's one host read per token
        if n_done == len(active):
            if park is not None:
                park(active, [(layer.keys, layer.values) for layer in cache.layers], mask, next_pos)
            break
        if n_done:
            if park is not None:
                done = finished.nonzero().squeeze(-1)
                park(active[done], [(layer.keys[done], layer.values[done]) for layer in cache.layers], mask[done],
                     next_pos[done])
            keep = (~finished).nonzero().squeeze(-1)
            cache.batch_select_indices(keep)
            active, tok, mask, next_pos = active[keep], tok[keep], mask[keep], next_pos[keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)  # [A, L + t + 1]
        if fast:
            logits = lean.step(model, tok, next_pos[:, 0], cache, mask)
        else:
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, use_cache=True,
                        **cache_arg(cache))
            cache, logits = cache_out(out), out.logits[:, -1]
        next_pos = next_pos + 1
    return tokens_out, logp_out


def end_at_first_stop(prompts: list[list[int]], tokens: torch.Tensor, logp: torch.Tensor, group_size: int,
                      stop_ids: list[int], pad_id: int) -> Rollout:
    """Sampled rows tokens, logp [B, T] -> a Rollout: each row ends at its first stop token (kept; the
    pad id may equal a stop token, as SmolLM's <|im_end|>), pad_id and log-prob 0 after it, truncated
    where a row has none, every row trimmed to the longest. Both local engines end with it."""
    n, width_gen = tokens.shape
    is_stop = torch.isin(tokens, torch.tensor(stop_ids, dtype=torch.long))  # [B, T]
    last = torch.where(is_stop.any(-1), is_stop.float().argmax(-1), width_gen - 1)  # [B]
    mask = torch.arange(width_gen)[None, :] <= last[:, None]  # [B, T]
    width = int(mask.sum(-1).max()) if n else 0
    return Rollout(
        prompt_ids=[list(p) for p in prompts],
        completion_ids=torch.where(mask, tokens, pad_id)[:, :width],
        completion_mask=mask[:, :width].float(),
        sampler_logp=torch.where(mask, logp, 0.0)[:, :width],  # select: forced padding may have logp -inf
        truncated=~is_stop.any(-1),
        group_size=group_size,
    )
