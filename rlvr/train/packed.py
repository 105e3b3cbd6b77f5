"""Padding-free (packed) training forwards (train.packed): a micro-batch's rows run as one row [1, N] of their
real tokens only, in one forward call.

Each row b contributes its completion up to its last real token (that token predicts nothing, so it is left
out) after its prompt. Two layouts, by what the model's attention takes:

- shared prompts (sdpa, eager: attention that takes a 4D mask as given): each group's prompt once, then its
  G completions, positions continuing from the prompt's; the mask [1, 1, N, N] lets a completion token see
  its group's prompt and its own earlier tokens, nothing else. Every prompt runs once, as in the padded
  shared-prefix forward, and no pad runs at all.
- rows (flash-attention and any other): each row's prompt + completion, positions restarting at 0 at each
  row, and no attention mask: transformers reads the rows' bounds from the position ids
  (masking_utils.find_packed_sequence_indices: a new row wherever a position is not the previous one + 1;
  the flash-attention paths build cu_seq_lens from them, modeling_flash_attention_utils, batch size 1) and
  makes the attention block-diagonal causal. Each prompt then runs once per completion.

A model whose attention keeps packed rows apart in neither way (ALiBi models such as Bloom, which take no
position ids) is refused up front by `check_packing`, which runs the model on the layout it would use rather
than trusting a list. The attention of one [N, N] masked product costs N^2 where the padded forward's costs
a row's length squared per row (flash-attention's varlen kernel skips the masked blocks).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo.masks import row_widths
from rlvr.errors import RlvrError
from rlvr.models import unwrap

MASKED_ATTENTION = ("sdpa", "eager")  # attention implementations that take a 4D mask as given


@dataclass(frozen=True, kw_only=True)
class Packing:
    """Where a micro-batch's tokens go in its one packed row, and where each completion token's predicting
    state comes back from."""

    ids: torch.Tensor  # [1, N] the prompts and completions, one after another, no pads
    positions: torch.Tensor  # [1, N] each token's position in its own prompt + completion
    source: torch.Tensor  # [B, Tc] long: the packed index of the state predicting completion token t of row b
    valid: torch.Tensor  # [B, Tc] bool: t < row b's width (source is 0 and meaningless elsewhere)
    # shared prompts only: [N] each token's group, and its row (-1 on a prompt, which its group's rows share)
    group: torch.Tensor | None = None
    row: torch.Tensor | None = None

    def attention_mask(self, attn: str) -> torch.Tensor | None:
        """None for the rows layout (the position ids say it all); for shared prompts [1, 1, N, N]: true (sdpa)
        or 0 (eager, which adds it to the scores) where query i may see key j: j <= i, the same group, and j
        on the prompt or on i's own row; else false (sdpa) or the lowest float (eager)."""
        if self.group is None:
            return None
        g, r = self.group, self.row
        n = g.shape[0]
        allowed = (torch.ones(n, n, dtype=torch.bool, device=g.device).tril() & (g[:, None] == g[None, :])
                   & ((r[None, :] == -1) | (r[:, None] == r[None, :])))[None, None]  # [1, 1, N, N]
        if attn == "eager":
            return torch.zeros(allowed.shape, device=g.device).masked_fill_(~allowed, torch.finfo(torch.float32).min)
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
    the state of token t - 1. shared: each group's prompt once, before its rows (a group with no token is left
    out); else each row as prompt + completion (positions from 0). A row of width 0 has nothing to predict and
    is left out. The indices are built on the host from the widths (one read of them) and cross to the device
    once."""
    device = completion_ids.device
    b_rows, tc = completion_ids.shape
    widths = row_widths(present).tolist()  # [B] host ints
    starts, offset = [], 0  # each prompt's offset in `table`: the prompts flat, then completion_ids flat
    for p in prompts:
        starts.append(offset)
        offset += len(p)
    index, positions, groups, rows = [], [], [], []
    source = [[0] * tc for _ in range(b_rows)]

    def put_prompt(p: int) -> int:  # the packed index of the prompt's last token
        tp = len(prompts[p])
        index.extend(range(starts[p], starts[p] + tp))
        positions.extend(range(tp))
        groups.extend([p] * tp)
        rows.extend([-1] * tp)
        return len(index) - 1

    for p in range(len(prompts)):
        members = [b for b in range(p * group_size, (p + 1) * group_size) if widths[b]]
        last = put_prompt(p) if shared and members else None
        for b in members:
            w, tp = widths[b], len(prompts[p])
            if not shared:
                last = put_prompt(p)
                rows[-tp:] = [b] * tp
            source[b][:w] = [last, *range(len(index), len(index) + w - 1)]
            index.extend(range(offset + b * tc, offset + b * tc + w - 1))
            positions.extend(range(tp, tp + w - 1))
            groups.extend([p] * (w - 1))
            rows.extend([b] * (w - 1))
    table = torch.cat([torch.tensor([t for p in prompts for t in p], dtype=completion_ids.dtype, device=device),
                       completion_ids.reshape(-1)])
    valid = torch.arange(tc, device=device)[None, :] < torch.tensor(widths, device=device)[:, None]  # [B, Tc]
    ints = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)
    return Packing(ids=table[ints(index)][None, :], positions=ints(positions)[None, :], source=ints(source),
                   valid=valid, group=ints(groups) if shared else None, row=ints(rows) if shared else None)


def packed_hidden(base, packing: Packing) -> torch.Tensor:
    """The trunk's states predicting every completion token [B, Tc, H] (zero past a row's width) from one
    forward of the packed row. The rows layout passes no attention mask: a 2D mask would turn transformers'
    packed-row detection off and every row would attend to the rows before it."""
    b_rows, tc = packing.source.shape
    if packing.ids.shape[1] == 0:  # no row has a token: nothing to run
        return torch.zeros(b_rows, tc, base.config.hidden_size, device=packing.ids.device)
    h = base(input_ids=packing.ids, position_ids=packing.positions,
             attention_mask=packing.attention_mask(base.config._attn_implementation),
             use_cache=False).last_hidden_state[0]  # [N, H]
    return h[packing.source] * packing.valid[..., None].to(h.dtype)  # [B, Tc, H]


PROBE = 8  # tokens of each of the probe's prompts and completions


def check_packing(model) -> None:
    """Refuse train.packed (RlvrError naming the key) unless this model's attention keeps packed rows apart
    in the layout it would run (shares_prompts).

    The check runs the model's own trunk (without gradient, in eval mode) on one prompt + completion packed
    alone and packed after another, and compares the second's states with a forward that surely leaks (the
    same packed row under a plain causal mask): where the packing holds, the row packed after another matches
    it alone to rounding, far closer than the leaking forward does; where it does not (ALiBi models such as
    Bloom take no position ids), the packed forward is the leaking one. A relative bound would not do: at
    random initialisation a leak moves the states by under 1% of their scale."""
    inner = unwrap(model)
    base = inner.base_model
    device = next(inner.parameters()).device
    tokens = (torch.arange(1, 4 * PROBE + 1, device=device) % inner.config.vocab_size).view(4, PROBE)
    prompts, completions = tokens[:2].tolist(), tokens[2:]  # two prompts, a completion of each
    present = torch.ones(2, PROBE, device=device)
    shared = shares_prompts(model)
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            both = pack(prompts, completions, present, 1, shared)
            packed = packed_hidden(base, both)[1].float()  # [PROBE, H] the second row's states
            alone = packed_hidden(base, pack(prompts[1:], completions[1:], present[1:], 1, shared))[0].float()
            leaking = base(input_ids=both.ids, position_ids=both.positions, attention_mask=torch.ones_like(both.ids),
                           use_cache=False).last_hidden_state[0][both.source[1]].float()
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
