"""The built-in engine: `generate` (one turn) and `BuiltinSession` (turn by turn, for multi-turn episodes,
where the environment's tokens are appended between turns), on the decode loop of decoding.py.

    s = engine.session(prompts, seeds=..., group_size=G, **sampling)   rows b = 0 .. P*G-1 (prompt b // G)
    s.sample(rows, caps) -> [Turn]     each row samples until a stop token or its cap
    s.extend(rows, tokens)             append tokens (a tool result, a follow-up turn) to those rows

`BuiltinSession` keeps every row's KV cache between turns: a turn's new tokens are prefilled onto it,
so no turn recomputes the history, and rows finish independently (a row that ends its turn leaves the
decoding batch with its cache parked until the environment answers). `RecomputeSession` runs any
engine's `generate` on the whole history each turn (HF generate, vLLM): the same tokens, more compute.

Draws: the first turn of every row comes from the group seeds exactly as single-turn `generate` draws
them, so a single-turn task samples the same completions either way; a later turn t of row b draws
from row_turn_seed(seed of b's group, b mod G, t).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.device import of_model
from rlvr.rollout import graphed
from rlvr.rollout.decoding import Rollout, decode, left_pad, prefill
from rlvr.rollout.kvcache import cache_arg, cache_of, cache_out
from rlvr.rollout.sampling import row_turn_seed, uniforms


@dataclass
class Turn:
    """One model turn of one row."""

    tokens: list[int]  # sampled tokens, the stop token included when there is one
    logp: list[float]  # their sampler log-probabilities
    stopped: bool  # ended with a stop token (else it reached its cap)


@dataclass
class _Block:
    """Cached context of some rows: per layer (keys, values) [N, H, L, D], attention mask [N, L], and the
    next-token logits [N, V] after it (None once the rows have sampled: their last token is pending)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor
    logits: torch.Tensor | None


@dataclass(kw_only=True)
class _CachedRow:
    block: _Block
    index: int  # the row's place in its block
    next_pos: int  # position of the next token fed
    pending: list[int]  # sampled tokens not yet in the cache (the last turn's final token)
    turn: int = 0


class _Draws:
    """The uniform draws of a session's turns (module docstring)."""

    def __init__(self, n_rows: int, group_size: int, temperature: float, seeds: list[int] | None,
                 generator: torch.Generator | None):
        self.n, self.g, self.temperature, self.seeds, self.generator = n_rows, group_size, temperature, seeds, generator

    def __call__(self, rows: list[int], turns: list[int], width: int) -> torch.Tensor | None:
        if self.temperature == 0:
            return None
        if rows == list(range(self.n)) and not any(turns):  # every row's first turn: as single-turn generate
            return uniforms(self.n, width, self.g, self.seeds, self.generator)
        if self.seeds is None:
            return torch.rand(len(rows), width, generator=self.generator)
        return torch.stack([torch.rand(width, generator=torch.Generator().manual_seed(
            row_turn_seed(self.seeds[b // self.g], b % self.g, t))) for b, t in zip(rows, turns)])


def _cut(tokens: list[int], logp: list[float], stop_ids: list[int], cap: int) -> Turn:
    """A row's sampled tokens up to its first stop token (kept) or its cap."""
    for i, tok in enumerate(tokens[:cap]):
        if tok in stop_ids:
            return Turn(tokens[:i + 1], logp[:i + 1], True)
    return Turn(tokens[:cap], logp[:cap], False)


class BuiltinSession:
    """Multi-turn sampling with the built-in engine, each row's KV cache kept between turns."""

    @torch.no_grad()
    def __init__(self, model, prompts: list[list[int]], *, group_size: int, temperature: float, top_p: float = 1.0,
                 top_k: int = 0, stop_ids: list[int], pad_id: int, seeds: list[int] | None = None,
                 generator: torch.Generator | None = None):
        self.model, self.stop_ids, self.pad_id, self.device = model, list(stop_ids), pad_id, of_model(model)
        self.sampling = (temperature, top_p, top_k)
        out, mask = prefill(model, prompts, pad_id, logits_to_keep=1)  # [P, Tp]; shared prefix run once
        block = _Block([(layer.keys, layer.values) for layer in cache_out(out).layers], mask, out.logits[:, -1])
        lengths = mask.sum(-1).tolist()
        self.rows = [_CachedRow(block=block, index=b // group_size, next_pos=lengths[b // group_size], pending=[])
                     for b in range(len(prompts) * group_size)]
        self.draws = _Draws(len(self.rows), group_size, temperature, seeds, generator)

    def _gather(self, rows: list[int], extra: int):
        """The rows' contexts as one batch: a cache with room for `extra` more positions, each row's
        context right-padded to the longest (the gap masked out), its mask [A, L], next positions [A, 1]
        and next-token logits [A, V] (None when the rows have pending tokens)."""
        states = [self.rows[b] for b in rows]
        width = max(s.block.mask.shape[1] for s in states)
        groups: dict[int, tuple[_Block, list[int], list[int]]] = {}
        for i, s in enumerate(states):
            _, pos, idx = groups.setdefault(id(s.block), (s.block, [], []))
            pos.append(i)
            idx.append(s.index)
        parts = [(blk, torch.tensor(pos, device=self.device), torch.tensor(idx, device=self.device))
                 for blk, pos, idx in groups.values()]
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        layers = []
        for layer in range(len(states[0].block.kv)):
            k0, v0 = states[0].block.kv[layer]
            k = k0.new_zeros((len(rows), k0.shape[1], width + extra, k0.shape[3]))  # zeros: masked gaps stay finite
            v = v0.new_zeros((len(rows), v0.shape[1], width + extra, v0.shape[3]))
            for blk, pos, idx in parts:
                bk, bv = blk.kv[layer]
                k[pos, :, :bk.shape[2]] = bk[idx]
                v[pos, :, :bv.shape[2]] = bv[idx]
            layers.append((k, v))
        logits = None
        if all(s.block.logits is not None and not s.pending for s in states):
            logits = states[0].block.logits.new_empty((len(rows), states[0].block.logits.shape[-1]))
        for blk, pos, idx in parts:
            mask[pos, :blk.mask.shape[1]] = blk.mask[idx]
            if logits is not None:
                logits[pos] = blk.logits[idx]
        next_pos = torch.tensor([[s.next_pos] for s in states], dtype=torch.long, device=self.device)
        return cache_of(layers, width, self.model.config), mask, next_pos, logits

    @torch.no_grad()
    def sample(self, rows: list[int], caps: list[int], keep: bool = True) -> list[Turn]:
        """One model turn for each of `rows` (at most caps[i] tokens). With keep=False the rows' contexts
        are dropped as they finish: no further turn or extend for them."""
        states = [self.rows[b] for b in rows]
        if any(s.pending or s.block.logits is None for s in states):
            raise RuntimeError("sample() again before extend(): a row's last turn is not in its context yet")
        u = self.draws(rows, [s.turn for s in states], max(caps))  # [A, T] on the host: the same on any device
        u = None if u is None else u.to(self.device)
        temperature, top_p, top_k = self.sampling
        sampling = (torch.tensor(caps), temperature, top_p, top_k, self.stop_ids, self.pad_id)
        static = {} if keep else None  # the static loop's buffers after the turn, to park the rows from
        if graphed.enabled(self.model) and len({id(s.block) for s in states}) == 1:
            # the static loop copies each row's context into its own buffers: read it from the block as it
            # is (rows of one prompt share a cache row) rather than gather a batch with room for the turn
            block, index = states[0].block, torch.tensor([s.index for s in states], device=self.device)
            next_pos = torch.tensor([[s.next_pos] for s in states], dtype=torch.long, device=self.device)
            cache = cache_of(block.kv, block.mask.shape[1], self.model.config)
            tokens, logp = graphed.decode_graphed(self.model, cache, block.logits[index], block.mask[index],
                                                  next_pos, u, *sampling, cache_rows=index, state=static)
        elif graphed.enabled(self.model):
            cache, mask, next_pos, logits = self._gather(rows, 0)
            tokens, logp = graphed.decode_graphed(self.model, cache, logits, mask, next_pos, u, *sampling,
                                                  state=static)
        else:
            cache, mask, next_pos, logits = self._gather(rows, max(caps))
            tokens, logp = decode(self.model, cache, logits, mask, next_pos, u, *sampling,
                                  self._parker(rows) if keep else None)
        turns = [_cut(t, lp, self.stop_ids, cap) for t, lp, cap in zip(tokens.tolist(), logp.tolist(), caps)]
        if static:
            self._park_static(rows, static, next_pos, [len(t.tokens) - 1 for t in turns])
        for s, turn in zip(states, turns):
            s.pending, s.turn = turn.tokens[-1:], s.turn + 1
        return turns

    def _park_static(self, rows: list[int], static: dict, next_pos: torch.Tensor, fed: list[int]) -> None:
        """Park the rows' contexts from the static loop's buffers (rlvr.rollout.graphed, `state`): each row
        keeps its context and the fed[i] tokens of this turn before its last (which stays pending); the
        positions after them, where a finished row went on decoding, are masked out. Copied, since the
        next rollout reuses the buffers."""
        ctx = static["context"]
        width = ctx + max(fed)
        kv = [(k[:, :, :width].clone(), v[:, :, :width].clone()) for k, v in static["kv"]]
        mask = static["mask"][:, :width].clone()  # [A, width]
        ends = ctx + torch.tensor(fed, device=mask.device)  # [A] first position after each row's fed tokens
        mask[:, ctx:] *= torch.arange(ctx, width, device=mask.device)[None, :] < ends[:, None]
        block = _Block(kv, mask, None)
        for i, (b, pos, n) in enumerate(zip(rows, next_pos[:, 0].tolist(), fed)):
            s = self.rows[b]
            s.block, s.index, s.next_pos = block, i, pos + n

    def _parker(self, rows: list[int]) -> Callable:
        def park(active: torch.Tensor, kv, mask: torch.Tensor, next_pos: torch.Tensor) -> None:
            block = _Block(kv, mask, None)
            for i, (a, pos) in enumerate(zip(active.tolist(), next_pos[:, 0].tolist())):
                s = self.rows[rows[a]]
                s.block, s.index, s.next_pos = block, i, pos
        return park

    @torch.no_grad()
    def extend(self, rows: list[int], tokens: list[list[int]]) -> None:
        """Append tokens to each row's context (after its pending last token), in one prefill."""
        states = [self.rows[b] for b in rows]
        feeds = [s.pending + list(t) for s, t in zip(states, tokens)]
        if not all(feeds):
            raise ValueError("extend() needs at least one token per row")
        ids, feed_mask = left_pad(feeds, self.pad_id, self.device)  # [A, W]: padding between old context and new tokens
        cache, mask, next_pos, _ = self._gather(rows, ids.shape[1])
        full = torch.cat([mask, feed_mask], dim=-1)  # [A, L + W]
        positions = next_pos + (feed_mask.cumsum(-1) - 1).clamp(min=0)  # [A, W]
        out = self.model(input_ids=ids, attention_mask=full, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **cache_arg(cache))
        block = _Block([(layer.keys, layer.values) for layer in cache_out(out).layers], full, out.logits[:, -1])
        for i, (s, feed) in enumerate(zip(states, feeds)):
            s.block, s.index, s.next_pos, s.pending = block, i, s.next_pos + len(feed), []


@torch.no_grad()
def generate(model, prompts: list[list[int]], *, group_size: int, max_new_tokens: int, temperature: float,
             top_p: float = 1.0, top_k: int = 0, stop_ids: list[int], pad_id: int,
             generator: torch.Generator | None = None, seeds: list[int] | None = None) -> Rollout:
    """group_size completions of each prompt (temperature 0: greedy): one turn of a BuiltinSession, so
    `generate`, the training loop's episodes and the benchmarks run the same code. Draws come from
    `seeds`, one per prompt (rlvr.rollout.sampling.group_seed), when given, else from `generator`.
    The Rollout is on the host (rlvr.rollout.decoding.Rollout.to moves a training batch)."""
    n = len(prompts) * group_size
    session = BuiltinSession(model, prompts, group_size=group_size, temperature=temperature, top_p=top_p,
                             top_k=top_k, stop_ids=stop_ids, pad_id=pad_id, seeds=seeds, generator=generator)
    return turns_to_rollout(prompts, session.sample(list(range(n)), [max_new_tokens] * n, keep=False), group_size,
                            pad_id)


def turns_to_rollout(prompts: list[list[int]], turns: list[Turn], group_size: int, pad_id: int) -> Rollout:
    """One turn per row -> a Rollout: tokens right-padded with pad_id (log-prob 0), truncated where a
    row reached its cap without a stop token."""
    width = max((len(t.tokens) for t in turns), default=0)
    ids = torch.full((len(turns), width), pad_id, dtype=torch.long)  # [B, Tc]
    mask, logp = torch.zeros((len(turns), width)), torch.zeros((len(turns), width))  # [B, Tc]
    for b, t in enumerate(turns):
        ids[b, :len(t.tokens)] = torch.tensor(t.tokens, dtype=torch.long)
        mask[b, :len(t.tokens)] = 1.0
        logp[b, :len(t.tokens)] = torch.tensor(t.logp)
    return Rollout(prompt_ids=[list(p) for p in prompts], completion_ids=ids, completion_mask=mask, sampler_logp=logp,
                   truncated=torch.tensor([not t.stopped for t in turns]),
                   group_size=group_size)


class RecomputeSession:
    """Multi-turn sampling through an engine's `generate`: each later turn runs the row's whole history
    as a prompt (HF generate, vLLM). The first turn is one ordinary grouped `generate` call."""

    def __init__(self, generate: Callable[..., Rollout], prompts: list[list[int]], *, group_size: int,
                 temperature: float, top_p: float = 1.0, top_k: int = 0, stop_ids: list[int], pad_id: int,
                 seeds: list[int] | None = None, generator: torch.Generator | None = None):
        self.generate, self.prompts, self.g, self.seeds = generate, prompts, group_size, seeds
        self.sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, stop_ids=list(stop_ids), pad_id=pad_id)
        self.generator = generator
        self.context = [list(prompts[b // group_size]) for b in range(len(prompts) * group_size)]
        self.pending: list[list[int]] = [[] for _ in self.context]
        self.turns = [0] * len(self.context)
        self.shared = True  # every row's context is still its group's prompt (nothing extended yet)

    def _run(self, prompts, seeds, group_size: int, width: int) -> list[Turn]:
        kw = {"generator": self.generator} if self.generator is not None and seeds is None else {}
        r = self.generate(prompts, seeds=seeds, group_size=group_size, max_new_tokens=width, **self.sampling, **kw)
        lengths = r.completion_mask.sum(-1).long().tolist()
        return [Turn(ids[:n], lp[:n], not tr) for ids, lp, n, tr in
                zip(r.completion_ids.tolist(), r.sampler_logp.tolist(), lengths, r.truncated.tolist())]

    def sample(self, rows: list[int], caps: list[int], keep: bool = True) -> list[Turn]:
        if any(self.pending[b] for b in rows):
            raise RuntimeError("sample() again before extend(): a row's last turn is not in its context yet")
        width = max(caps)
        if rows == list(range(len(self.context))) and self.shared and not any(self.turns):
            got = self._run(self.prompts, self.seeds, self.g, width)
        else:
            seeds = None if self.seeds is None else [row_turn_seed(self.seeds[b // self.g], b % self.g, self.turns[b])
                                                     for b in rows]
            got = self._run([self.context[b] for b in rows], seeds, 1, width)
        turns = [_cut(t.tokens, t.logp, self.sampling["stop_ids"], cap) for t, cap in zip(got, caps)]
        for b, t in zip(rows, turns):
            self.pending[b], self.turns[b] = t.tokens, self.turns[b] + 1
        return turns

    def extend(self, rows: list[int], tokens: list[list[int]]) -> None:
        self.shared = False
        for b, t in zip(rows, tokens):
            self.context[b] += self.pending[b] + list(t)
            self.pending[b] = []
