"""Padding-free (packed) training forwards (train.packed): a micro-batch's rows run as their real tokens only, in
one forward call.

Each row b contributes its completion up to its last real token (that token predicts nothing, so it is left
out) after its prompt. Two layouts, by what the model's attention takes:

- shared prompts (sdpa, eager: attention that takes a 4D mask as given): one packed row per group, its prompt
  once and then its G completions, positions continuing from the prompt's, the groups' rows right-padded to
  the longest; the mask [groups, 1, N, N] lets a completion token see its group's prompt and its own earlier
  tokens, nothing else. Every prompt runs once, as in the padded shared-prefix forward, and pads run only at
  the end of the shorter groups' rows. A row per group rather than one row for the micro-batch: sdpa computes
  every pair of a masked product, so a micro-batch of m groups in one row would cost m^2 groups' attention
  (and mask) where a row each costs m.
- rows (flash-attention and any other): every row's prompt + completion in one row [1, N], positions
  restarting at 0 at each row, and no attention mask: transformers reads the rows' bounds from the position
  ids (masking_utils.find_packed_sequence_indices: a new row wherever a position is not the previous one + 1;
  the flash-attention paths build cu_seq_lens from them, modeling_flash_attention_utils, batch size 1) and
  makes the attention block-diagonal causal; its varlen kernel skips the masked blocks. Each prompt then runs
  once per completion.

A model whose attention keeps packed rows apart in neither way (ALiBi models such as Bloom, which take no
position ids) is refused up front by `check_packing`, which runs the model on the layout it would use rather
than trusting a list.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo.masks import row_widths
from rlvr.errors import RlvrError
from rlvr.models.lora import unwrap

MASKED_ATTENTION = ("sdpa", "eager")  # attention implementations that take a 4D mask as given


PAD = -2  # a pad's row id (shared prompts): after its row's real tokens, it sees the prompt and pads only


@dataclass(frozen=True, kw_only=True)
class Packing:
    """Where a micro-batch's tokens go in its packed rows, and where each completion token's predicting state
    comes back from."""

    ids: torch.Tensor  # [R, N] the prompts and completions, one after another (shared prompts: pads at the end)
    positions: torch.Tensor  # [R, N] each token's position in its own prompt + completion (0 on a pad)
    source: torch.Tensor  # [B, Tc] long: the index in the flattened [R * N] of the state predicting token t of row b
    valid: torch.Tensor  # [B, Tc] bool: t < row b's width (source is 0 and meaningless elsewhere)
    row: torch.Tensor | None = None  # shared prompts only: [R, N] each token's row b, -1 on the prompt, PAD on a pad

    def attention_mask(self, attn: str) -> torch.Tensor | None:
        """None for the rows layout (the position ids say it all); for shared prompts [R, 1, N, N]: true (sdpa)
        or 0 (eager, which adds it to the scores) where query i may see key j of its packed row: j <= i, and j
        on the prompt or on i's own row (a pad, on no row, sees the prompt and the pads before it); else false
        (sdpa) or the lowest float (eager)."""
        if self.row is None:
            return None
        r = self.row
        n = r.shape[1]
        allowed = (torch.ones(n, n, dtype=torch.bool, device=r.device).tril()
                   & ((r[:, None, :] == -1) | (r[:, :, None] == r[:, None, :])))[:, None]  # [R, 1, N, N]
        if attn == "eager":
            return torch.zeros(allowed.shape, device=r.device).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        return allowed


def shares_prompts(model) -> bool:
    """Whether train.packed runs this model in the shared-prompt layout (its attention takes a 4D mask)."""
    return getattr(unwrap(model).config, "_attn_implementation", None) in MASKED_ATTENTION


def pack(prompts: list[list[int]], completion_ids: torch.Tensor, present: torch.Tensor, group_size: int,
         shared: bool = False) -> Packing:
    """prompts: P token lists; completion_ids, present [B, Tc] (present: every real token after the prompt,
    the model's and an environment's), B = P * group_size, row b continuing prompt b // group_size.

    Row b of width w (row_widths: the index after its last real token) runs completion tokens 0..w-2 after its
    prompt of Tp tokens, at positions Tp..Tp+w-2; token 0 is predicted by the prompt's last state, token t by
    the state of token t - 1. shared: a packed row per group, its prompt once before its rows (a group with no
    token is left out), pads (token 0) after; else one packed row of every row's prompt + completion (positions
    from 0). A row of width 0 has nothing to predict and is left out. The indices are built on the host from the
    widths (one read of them) and cross to the device once."""
    device = completion_ids.device
    b_rows, tc = completion_ids.shape
    widths = row_widths(present).tolist()  # [B] host ints
    starts, offset = [], 0  # each prompt's offset in `table`: the prompts flat, then completion_ids flat, a pad
    for p in prompts:
        starts.append(offset)
        offset += len(p)
    pad = offset + b_rows * tc
    packed = [([], [], [])]  # each packed row's table indices, positions and row ids
    where = [(0, [])] * b_rows  # row b: its packed row, and the places there of its tokens' predicting states

    def put_prompt(row: tuple, p: int, row_id: int) -> int:  # the place of the prompt's last token in row
        tp = len(prompts[p])
        row[0].extend(range(starts[p], starts[p] + tp))
        row[1].extend(range(tp))
        row[2].extend([row_id] * tp)
        return len(row[0]) - 1

    for p in range(len(prompts)):
        members = [b for b in range(p * group_size, (p + 1) * group_size) if widths[b]]
        if shared and members:
            if packed[-1][0]:
                packed.append(([], [], []))
            last = put_prompt(packed[-1], p, -1)
        row = packed[-1]
        for b in members:
            w, tp = widths[b], len(prompts[p])
            if not shared:
                last = put_prompt(row, p, b)
            where[b] = (len(packed) - 1, [last, *range(len(row[0]), len(row[0]) + w - 1)])
            row[0].extend(range(offset + b * tc, offset + b * tc + w - 1))
            row[1].extend(range(tp, tp + w - 1))
            row[2].extend([b] * (w - 1))
    n = max(len(row[0]) for row in packed)
    index = [row[0] + [pad] * (n - len(row[0])) for row in packed]
    positions = [row[1] + [0] * (n - len(row[1])) for row in packed]
    rows = [row[2] + [PAD] * (n - len(row[2])) for row in packed]
    source = [[r * n + i for i in places] + [0] * (tc - len(places)) for r, places in where]
    table = torch.cat([torch.tensor([t for p in prompts for t in p], dtype=completion_ids.dtype, device=device),
                       completion_ids.reshape(-1), torch.zeros(1, dtype=completion_ids.dtype, device=device)])
    valid = torch.arange(tc, device=device)[None, :] < torch.tensor(widths, device=device)[:, None]  # [B, Tc]
    ints = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)
    return Packing(ids=table[ints(index)], positions=ints(positions), source=ints(source),
                   valid=valid, row=ints(rows) if shared else None)


def packed_hidden(base, packing: Packing) -> torch.Tensor:
    """The trunk's states predicting every completion token [B, Tc, H] (zero past a row's width) from one
    forward of the packed rows. The rows layout passes no attention mask: a 2D mask would turn transformers'
    packed-row detection off and every row would attend to the rows before it."""
    b_rows, tc = packing.source.shape
    if packing.ids.shape[1] == 0:  # no row has a token: nothing to run
        return torch.zeros(b_rows, tc, base.config.hidden_size, device=packing.ids.device)
    h = base(input_ids=packing.ids, position_ids=packing.positions,
             attention_mask=packing.attention_mask(base.config._attn_implementation),
             use_cache=False).last_hidden_state  # [R, N, H]
    h = h.reshape(-1, h.shape[-1])  # [R * N, H]
    return take_rows(h, packing.source) * packing.valid[..., None].to(h.dtype)  # [B, Tc, H]


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index] along the first dimension, [*index.shape, *x.shape[1:]], where index repeats entries (a prompt's
    state read by each of its G completions). Through index_select, whose backward sums the repeats with
    index_add_ in the index's order: the same gradient bit for bit on every run. Advanced indexing's backward
    (index_put_ with accumulate) adds them with atomics in whatever order the threads reach them once the
    gradient passes 32768 elements on a CPU with more than one thread, so the same step differed in its last
    bits from run to run (and, measured on 2 threads, the atomics were slower: 40 ms against 2 ms for a
    micro-batch's prompt keys)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


PROBE = 8  # tokens of each of the probe's prompts and completions


def check_packing(model) -> None:
    """Refuse train.packed (RlvrError naming the key) unless this model's attention keeps packed rows apart
    in the layout it would run (shares_prompts).

    The check runs the model's own trunk (without gradient, in eval mode) on a prompt's completion packed
    alone and packed after another completion of it, and compares its states with a forward that surely leaks
    (the same packed row under a plain causal mask): where the packing holds, the row packed after another matches
    it alone to rounding, far closer than the leaking forward does; where it does not (ALiBi models such as
    Bloom take no position ids), the packed forward is the leaking one. A relative bound would not do: at
    random initialisation a leak moves the states by under 1% of their scale."""
    inner = unwrap(model)
    base = inner.base_model
    device = next(inner.parameters()).device
    tokens = (torch.arange(1, 3 * PROBE + 1, device=device) % inner.config.vocab_size).view(3, PROBE)
    prompt, completions = tokens[:1].tolist(), tokens[1:]  # one prompt, two completions of it
    present = torch.ones(2, PROBE, device=device)
    shared = shares_prompts(model)
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            both = pack(prompt, completions, present, 2, shared)
            packed = packed_hidden(base, both)[1].float()  # [PROBE, H] the second row's states
            alone = packed_hidden(base, pack(prompt, completions[1:], present[1:], 1, shared))[0].float()
            leaking = base(input_ids=both.ids, position_ids=both.positions, attention_mask=torch.ones_like(both.ids),
                           use_cache=False).last_hidden_state.flatten(0, 1)[both.source[1]].float()
    except (TypeError, ValueError, RuntimeError) as e:  # a trunk that takes no position ids or no such mask
        raise RlvrError(f"train.packed: {type(inner).__name__} cannot run packed rows ({e}); "
                        "set train.packed=false") from e
    finally:
        inner.train(was_training)
    gap, leak = float((packed - alone).abs().max()), float((leaking - alone).abs().max())
    if not gap <= PROBE_SHARE * leak:
        attn = getattr(inner.config, "_attn_implementation", None)
        raise RlvrError(f"train.packed: the attention of {type(inner).__name__} (attn_implementation={attn!r}) "
                        "does not keep packed rows apart (a row packed after another moved by "
                        f"{gap:.3g}, as a plain causal mask moves it by {leak:.3g}); set train.packed=false, or "
                        "load the model with an attention that reads packed rows (sdpa, eager, flash_attention_2)")


# The share of a leaking forward's change that a packed row may show: rounding of the rows' different
# attention shapes (zero in fp32 and bf16 on the CPU, tests/train/test_packed.py) stays far below it.
PROBE_SHARE = 0.1
