"""Decoding over static buffers, replayed as a CUDA graph (`rollout.cuda_graph`).

On a GPU a decode step of a small batch is a few milliseconds of kernels launched one by one from Python,
so the host, not the GPU, sets the pace (HF `generate` at batch 64 on an H200: 57 ms per step eager, 4.8 ms
replayed as a CUDA graph). A graph replays a fixed sequence of kernels on fixed addresses, so this loop
keeps every shape and address fixed for the whole rollout:

- the KV cache is one buffer per layer [B, HK, L, D] for the prompt and every new token; each step writes
  its token's keys and values at slot `slot` (a device counter) and attends over the first W positions,
  the smallest multiple of 64 that holds the slot, the unwritten ones masked (rlvr.rollout.lean's
  attention, the same math as the model's forward): one capture per window W, all of a rollout's in one
  memory pool, so a step reads the filled part of the cache and at most 63 empty positions rather than
  all L (at 32x8x256 from 47-token prompts, half the cache is empty on average);
- rows never leave the batch: a row that finished keeps decoding, and what it samples after its end is
  recorded as pad_id with log-prob 0, so the result equals the compacting loop of
  rlvr.rollout.decoding.decode token for token (tests/rollout/test_graphed.py);
- sampling (rlvr.rollout.sampling.sample_next) runs inside the step from the rollout's per-row draws
  u [B, T], read at the device counter `t`, so the draws and therefore the tokens are those of the
  compacting loop; stop checks run on the device too, and the host reads `done.all()` once every
  `check_every` tokens.

Rows are padded to a power of two and L to a multiple of 64; the buffers and captures are kept by rows,
new tokens and sampling settings, not by prompt length, so rollouts of similar size reuse them while L is
long enough (a capture is about one step's kernels recorded, plus a warm-up step or two). On the CPU the same
static loop runs eagerly (`capture=False`): it is what the tests compare with the compacting loop there,
while CPU rollouts keep the compacting loop, which does less work per token.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlvr.models.lora import unwrap
from rlvr.rollout import lean
from rlvr.rollout.sampling import sample_next

CHECK_EVERY = 16  # tokens between the host's reads of done.all()
L_MULTIPLE = 64  # cache lengths are padded to a multiple of this, so captures are reused across rollouts
KEEP = 2  # captured graphs kept per model (each holds its own KV buffers)


class _SlotKV:
    """One layer's static cache as lean._attend sees it: update writes the new keys / values at the slot
    and returns the first `window` positions of the buffers [B, HK, window, D] (views: fixed addresses)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, slot: torch.Tensor):
        self.keys, self.values, self.slot, self.window = keys, values, slot, keys.shape[2]

    def update(self, k: torch.Tensor, v: torch.Tensor):
        self.keys.index_copy_(2, self.slot, k.to(self.keys.dtype))
        self.values.index_copy_(2, self.slot, v.to(self.values.dtype))
        return self.keys[:, :, :self.window], self.values[:, :, :self.window]


@dataclass(kw_only=True)
class _State:
    """Every tensor one decode step reads or writes; a captured graph is bound to these addresses."""

    kv: list[_SlotKV]
    mask: torch.Tensor  # [B, L] long: 1 where a row attends
    tok: torch.Tensor  # [B] the token fed next
    pos: torch.Tensor  # [B] its position id
    slot: torch.Tensor  # [1] the cache slot it is written to (the same for every row)
    t: torch.Tensor  # [1] the index of the token sampled by this step
    u: torch.Tensor | None  # [B, T] the rollout's draws (None: greedy)
    caps: torch.Tensor  # [B] tokens allowed per row
    done: torch.Tensor  # [B] bool: the row has ended (stop token or cap)
    tokens: torch.Tensor  # [B, T] sampled tokens, pad_id after a row's end
    logp: torch.Tensor  # [B, T] their sampler log-probs, 0 after a row's end
    stop: torch.Tensor  # [S] the stop ids (kept here: a graph replayed later reads this very buffer)


class Graphs:
    """Captured decode steps of one model, keyed by shape and sampling settings (`capture`: record CUDA
    graphs; False runs the same static loop eagerly, which the CPU tests use)."""

    def __init__(self, capture: bool = True):
        self.capture = capture
        self.entries: dict[tuple, tuple[_State, dict[int, torch.cuda.CUDAGraph]]] = {}  # by attention window

    def __deepcopy__(self, memo) -> "Graphs":
        """A copy of the model (saving a LoRA model merges a deep copy) captures its own: a CUDA graph
        cannot be copied (deepcopy raised, pickling torch._C._CUDAGraph), and the buffers it is bound
        to belong to this model."""
        return Graphs(self.capture)


def enable(model: nn.Module, capture: bool = True) -> bool:
    """Decode `model` (a Llama-family causal LM or its rollout copy: lean.supports) through this module
    from now on; False (nothing changed) for a model lean cannot step, or whose rotary embedding reads
    the positions on the host (transformers' dynamic and longrope scaling: torch.max(position_ids) and
    a Python comparison at every call, which a graph cannot capture and a replay would not redo), or
    that FSDP shards."""
    if not lean.supports(model) or any(hasattr(m, "unshard") and hasattr(m, "set_reshard_after_forward")
                                       for m in model.modules()):
        return False  # FSDP2 frees the full weights at reshard and gathers them into new memory: a replay would
        # read the old addresses (duck-typed as rlvr.train.distributed does: no torch.distributed import)
    rope_type = getattr(getattr(unwrap(model).model, "rotary_emb", None), "rope_type", "default")
    if "dynamic" in str(rope_type) or rope_type == "longrope":
        return False
    unwrap(model).rlvr_graphs = Graphs(capture)
    return True


def enabled(model: nn.Module) -> bool:
    return getattr(unwrap(model), "rlvr_graphs", None) is not None


def release(model: nn.Module) -> int:
    """Drop `model`'s captured steps and the static buffers they are bound to (KV cache, draws, tokens),
    so the trainer's update can use that memory (at 1.7B, 8x8x128: about 2.4 GB; 32x8x256: 16 GB); the
    next rollout allocates and captures again (a few steps' time). Returns how many were dropped."""
    graphs = getattr(unwrap(model), "rlvr_graphs", None)
    if graphs is None:
        return 0
    n = len(graphs.entries)
    graphs.entries.clear()
    return n


def _bucket(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _record(st: _State, tok: torch.Tensor, logp: torch.Tensor, pad_id: int) -> None:
    """Write token t of every row (pad_id / 0 for rows already done), then mark the rows it ends."""
    st.tokens.index_copy_(1, st.t, torch.where(st.done, pad_id, tok)[:, None])
    st.logp.index_copy_(1, st.t, torch.where(st.done, 0.0, logp.float())[:, None])
    # a broadcast comparison, not torch.isin: isin switches to a sort-and-unique path (a host read,
    # refused while capturing) once there are more than a few stop ids per row
    st.done |= (tok[:, None] == st.stop).any(-1) | (st.caps <= st.t + 1)
    st.tok.copy_(tok)


def _step(lm: nn.Module, st: _State, sampling: tuple, pad_id: int, window: int | None = None) -> None:
    """Feed st.tok at st.slot, sample token st.t + 1 from the result: every shape and address fixed.
    Attention reads the first `window` cache positions (all when None), which must hold the slot."""
    window = window or st.mask.shape[1]
    for kv in st.kv:
        kv.window = window
    st.t.add_(1)
    st.mask.index_fill_(1, st.slot, 1)
    trunk = lm.model
    x = trunk.embed_tokens(st.tok)  # [B, E]
    cos, sin = trunk.rotary_emb(x, st.pos[:, None])  # [B, 1, D]
    mask = st.mask[:, :window]  # [B, W]
    bias = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(mask == 0, float("-inf"))
    h = x
    for layer, kv in zip(trunk.layers, st.kv):
        h = lean._layer(layer, kv, h, cos, sin, bias[:, None, None])
    logits = lm.lm_head(lean._rms_norm(trunk.norm, h))  # [B, V]
    temperature, top_p, top_k = sampling
    u = None if st.u is None else st.u.index_select(1, st.t).squeeze(1)
    tok, logp = sample_next(logits, temperature, top_p, top_k, u)
    _record(st, tok, logp, pad_id)
    st.pos.add_(1)
    st.slot.add_(1)


def _new_state(cache, n_rows: int, length: int, width: int, u_width: int, greedy: bool, stop_ids: list[int],
               device) -> _State:
    """Zeroed static buffers for n_rows rows, a cache of `length` positions and `width` sampled tokens.
    Under autocast the cache is in autocast's dtype: attention casts its inputs to it anyway (the same
    values), while transformers' prefill leaves keys in float32 (bf16 q/k times float32 RoPE tables), which
    attention would re-cast over all L positions of every layer at every step (2x the cache memory, 3x the
    key traffic)."""
    amp = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    kv = [_SlotKV(layer.keys.new_zeros((n_rows, layer.keys.shape[1], length, layer.keys.shape[3]), dtype=amp),
                  layer.values.new_zeros((n_rows, layer.values.shape[1], length, layer.values.shape[3]), dtype=amp),
                  torch.zeros(1, dtype=torch.long, device=device)) for layer in cache.layers]
    slot = kv[0].slot
    for layer in kv:
        layer.slot = slot  # one counter for every layer
    zeros = lambda *shape, **kw: torch.zeros(shape, device=device, **kw)
    return _State(kv=kv, mask=zeros(n_rows, length, dtype=torch.long), tok=zeros(n_rows, dtype=torch.long),
                  pos=zeros(n_rows, dtype=torch.long), slot=slot, t=zeros(1, dtype=torch.long),
                  u=None if greedy else zeros(n_rows, u_width), caps=zeros(n_rows, dtype=torch.long),
                  done=zeros(n_rows, dtype=torch.bool), tokens=zeros(n_rows, width, dtype=torch.long),
                  logp=zeros(n_rows, width),
                  stop=torch.tensor(stop_ids, dtype=torch.long, device=device))


def _load(st: _State, cache, logits0: torch.Tensor, mask: torch.Tensor, next_pos: torch.Tensor,
          u: torch.Tensor | None, caps: torch.Tensor, sampling: tuple, pad_id: int,
          cache_rows: torch.Tensor | None) -> None:
    """Fill the buffers for a rollout of A <= B rows (rows past A repeat row 0 and start done) and sample
    token 0 from the prompt's logits [A, V]; row i's context is cache row cache_rows[i] (else row i)."""
    a, ctx = mask.shape
    rows = torch.cat([torch.arange(a, device=mask.device), mask.new_zeros(st.tok.shape[0] - a)])  # [B]
    source = rows if cache_rows is None else cache_rows[rows]  # [B]
    for layer, kv in zip(cache.layers, st.kv):
        kv.keys[:, :, ctx:].zero_()  # finite where masked: a stale NaN would survive the mask (0 * NaN)
        kv.values[:, :, ctx:].zero_()
        kv.keys[:, :, :ctx] = layer.keys[source, :, :ctx]  # one layer at a time: [B, HK, ctx, D] transient
        kv.values[:, :, :ctx] = layer.values[source, :, :ctx]
    st.mask.zero_()
    st.mask[:, :ctx] = mask[rows]
    st.pos.copy_(next_pos[rows, 0])
    st.slot.fill_(ctx)
    st.t.fill_(0)
    if st.u is not None:
        st.u.zero_()
        st.u[:, :u.shape[1]] = u[rows]
    st.caps.copy_(caps.to(mask.device)[rows])
    st.done.copy_(torch.arange(st.done.shape[0], device=mask.device) >= a)
    st.tokens.fill_(pad_id)
    st.logp.zero_()
    temperature, top_p, top_k = sampling
    tok, logp = sample_next(logits0[rows], temperature, top_p, top_k, None if u is None else st.u[:, 0])
    _record(st, tok, logp, pad_id)


def _snapshot(st: _State) -> dict:
    return {k: getattr(st, k).clone() for k in ("mask", "tok", "pos", "slot", "t", "done", "tokens", "logp")}


def _restore(st: _State, saved: dict) -> None:
    for k, v in saved.items():
        getattr(st, k).copy_(v)


def _warm_up(lm: nn.Module, st: _State, sampling: tuple, pad_id: int, window: int | None = None,
             steps: int = 2) -> None:
    """Run up to `steps` steps (lazy initialisation, cuBLAS workspaces) and put the counters and outputs
    back (the cache slots they wrote are masked until a real step overwrites them). Never past the last
    token: a step at t = T writes tokens[:, T], out of bounds (on CUDA a device-side assert); never past
    the window: the slots written must lie inside it."""
    saved = _snapshot(st)
    t, slot = int(st.t), int(st.slot)
    room = min(st.tokens.shape[1] - 1 - t, (window or st.mask.shape[1]) - slot)
    for _ in range(max(0, min(steps, room))):
        _step(lm, st, sampling, pad_id, window)
    _restore(st, saved)


def _capture(lm: nn.Module, st: _State, sampling: tuple, pad_id: int, window: int,
             pool) -> torch.cuda.CUDAGraph:
    """Record one step attending over `window` positions as a CUDA graph, after warm-up steps on a side
    stream (_warm_up), in memory pool `pool` (None: a new one): the windows of a rollout replay one after
    another, so their graphs share one pool."""
    # autocast's cast cache is cleared when the rollout's autocast context exits, but a graph would keep
    # reading the cached copies: capture with the cache off, so the casts are part of the graph
    amp = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"),
                         cache_enabled=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), amp:
        _warm_up(lm, st, sampling, pad_id, window, steps=2 if pool is None else 1)
    torch.cuda.current_stream().wait_stream(side)
    saved = _snapshot(st)
    graph = torch.cuda.CUDAGraph()
    # capture_begin / capture_end rather than torch.cuda.graph, which also runs gc.collect() and
    # empty_cache() first: with captures made anew after every update (release), that would hand the
    # update's cached blocks back to the driver at every rollout, to be cudaMalloc'ed again
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), amp:
        graph.capture_begin(*([] if pool is None else [pool]))
        try:
            _step(lm, st, sampling, pad_id, window)
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    _restore(st, saved)  # capturing ran nothing, but the restore keeps the buffers as loaded for sure
    return graph


@torch.no_grad()
def decode_graphed(model: nn.Module, cache, logits: torch.Tensor, mask: torch.Tensor, next_pos: torch.Tensor,
           u: torch.Tensor | None, caps: torch.Tensor, temperature: float, top_p: float, top_k: int,
           stop_ids: list[int], pad_id: int, check_every: int = CHECK_EVERY,
           cache_rows: torch.Tensor | None = None, state: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """rlvr.rollout.decoding.decode's contract without `park` (rows that end are not kept for a later
    turn): logits [A, V], mask [A, L0], next_pos [A, 1], u [A, T] or None, caps [A] (host) -> tokens and
    sampler log-probs [A, T], pad_id / 0 after each row's end, on the model's device. cache_rows [A]: the
    row of `cache` that holds row i's context (a prefill's P rows serve P x G rollout rows); the cache
    needs no room for new tokens, its first L0 positions are read. `state`: a dict that receives the rows'
    static buffers as they are at the end (views, valid until the next rollout on these buffers): kv, per
    layer (keys, values) [A, HK, L, D], mask [A, L] and context L0 (a multi-turn session parks from them)."""
    lm = unwrap(model)
    graphs: Graphs = lm.rlvr_graphs
    device, (a, ctx) = logits.device, mask.shape
    width = int(caps.max()) if len(caps) else 0
    n_rows, length = _bucket(a), -(-(ctx + width) // L_MULTIPLE) * L_MULTIPLE
    sampling = (temperature, top_p, top_k)
    # no cache length in the key: a capture attends over its window whatever the prompt's length, so a
    # rollout with another prompt length reuses the buffers and captures while they are long enough
    key = (n_rows, width, u is None, sampling, tuple(stop_ids), pad_id, logits.dtype,
           cache.layers[0].keys.dtype, torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    if key in graphs.entries and graphs.entries[key][0].mask.shape[1] < length:
        del graphs.entries[key]  # too short for this prompt: new buffers, new captures
    if key not in graphs.entries:
        while len(graphs.entries) >= KEEP:
            graphs.entries.pop(next(iter(graphs.entries)))
        graphs.entries[key] = (_new_state(cache, n_rows, length, width, width, u is None, stop_ids, device), {})
    st, by_window = graphs.entries[key]
    length = st.mask.shape[1]
    _load(st, cache, logits, mask, next_pos, u, caps, sampling, pad_id, cache_rows)
    for t in range(1, width):
        window = min(length, -(-(ctx + t) // L_MULTIPLE) * L_MULTIPLE)  # step t writes slot ctx + t - 1
        if graphs.capture and window not in by_window:
            pool = next(iter(by_window.values())).pool() if by_window else None
            by_window[window] = _capture(lm, st, sampling, pad_id, window, pool)
        if graphs.capture:
            by_window[window].replay()
        else:
            _step(lm, st, sampling, pad_id, window)
        if t % check_every == 0 and bool(st.done.all()):
            break
    if state is not None:
        state.update(kv=[(kv.keys[:a], kv.values[:a]) for kv in st.kv], mask=st.mask[:a], context=ctx)
    return st.tokens[:a].clone(), st.logp[:a].clone()
