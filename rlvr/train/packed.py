"""Padding-free (packed) training forwards (train.packed): a micro-batch's rows run as one sequence of their
real tokens only.

Each row b is its prompt followed by its completion up to its last real token (that token predicts nothing,
so it is left out), and the rows are concatenated into one row [1, N] with no pad anywhere; the position ids
restart at 0 at each row. No attention mask is passed: transformers then reads the rows' bounds from the
position ids (masking_utils.find_packed_sequence_indices: a new row wherever a position is not the previous
one + 1) and makes the attention block-diagonal causal, each row attending to its own earlier tokens only;
the flash-attention paths build cu_seq_lens from the same position ids (modeling_flash_attention_utils,
batch size 1). A model whose attention does not honour this (ALiBi models such as Bloom, which take no
position ids) is refused up front by `check_packing`, which runs the check rather than trusting a list.

What it saves: every pad of the padded forward (completions of varied length right-padded to their bucket,
prompts left-padded to the longest); what it costs: each prompt runs once per completion (G times per group)
rather than once per group as the shared-prefix forward runs it, and the attention of sdpa / eager is one
[N, N] masked product rather than one per row (flash-attention's varlen kernel skips the masked blocks).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo.masks import row_widths
from rlvr.errors import RlvrError
from rlvr.models import unwrap


@dataclass(frozen=True)
class Packing:
    """Where a micro-batch's tokens go in its one packed row, and where each completion token's predicting
    state comes back from."""

    ids: torch.Tensor  # [1, N] the rows' prompts + completions, one after another, no pads
    positions: torch.Tensor  # [1, N] each token's position in its own row: 0 at every row's first token
    source: torch.Tensor  # [B, Tc] long: the packed index of the state predicting completion token t of row b
    valid: torch.Tensor  # [B, Tc] bool: t < row b's width (source is 0 and meaningless elsewhere)


def pack(prompts: list[list[int]], completion_ids: torch.Tensor, present: torch.Tensor,
         group_size: int) -> Packing:
    """prompts: P token lists; completion_ids, present [B, Tc] (present: every real token after the prompt,
    the model's and an environment's), B = P * group_size, row b continuing prompt b // group_size.

    Row b of width w (row_widths: the index after its last real token) is packed as prompt + completion
    tokens 0..w-2 (Tp + w - 1 tokens); completion token t is predicted by the state at its start + Tp - 1 + t
    (token 0 from the prompt's last). A row of width 0 has nothing to predict and is left out. The indices
    are built on the host from the widths (one read of them) and cross to the device once."""
    device = completion_ids.device
    b_rows, tc = completion_ids.shape
    widths = row_widths(present).tolist()  # [B] host ints
    index, positions, source = [], [], [[0] * tc for _ in range(b_rows)]
    prompt_start = []  # each prompt's offset in the table below: prompts first, then completion_ids flat
    offset = 0
    for p in prompts:
        prompt_start.append(offset)
        offset += len(p)
    table_completions = offset
    n = 0
    for b, w in enumerate(widths):
        if w == 0:
            continue
        p = b // group_size
        tp = len(prompts[p])
        index += range(prompt_start[p], prompt_start[p] + tp)
        index += range(table_completions + b * tc, table_completions + b * tc + w - 1)
        positions += range(tp + w - 1)
        source[b][:w] = range(n + tp - 1, n + tp - 1 + w)
        n += tp + w - 1
    table = torch.cat([torch.tensor([t for p in prompts for t in p], dtype=completion_ids.dtype, device=device),
                       completion_ids.reshape(-1)])
    valid = torch.arange(tc, device=device)[None, :] < torch.tensor(widths, device=device)[:, None]  # [B, Tc]
    return Packing(ids=table[torch.tensor(index, dtype=torch.long, device=device)][None, :],
                   positions=torch.tensor(positions, dtype=torch.long, device=device)[None, :],
                   source=torch.tensor(source, dtype=torch.long, device=device), valid=valid)


def packed_hidden(base, packing: Packing) -> torch.Tensor:
    """The trunk's states predicting every completion token [B, Tc, H] (zero past a row's width) from one
    forward of the packed row. attention_mask stays None: a mask given would turn transformers' packed-row
    detection off and every row would attend to the rows before it."""
    b_rows, tc = packing.source.shape
    if packing.ids.shape[1] == 0:  # no row has a token: nothing to run
        return torch.zeros(b_rows, tc, base.config.hidden_size, device=packing.ids.device)
    h = base(input_ids=packing.ids, position_ids=packing.positions, attention_mask=None,
             use_cache=False).last_hidden_state[0]  # [N, H]
    return h[packing.source] * packing.valid[..., None].to(h.dtype)  # [B, Tc, H]


PROBE = 8  # tokens of each of the probe's two rows


def check_packing(model) -> None:
    """Refuse train.packed (RlvrError naming the key) unless this model's attention keeps packed rows apart.

    The check runs the model's own trunk (without gradient, in eval mode) on a row alone and packed after
    another row, positions restarting at 0, and compares that row's states with a forward that surely
    leaks (the same packed row under a plain causal mask): where the attention is block-diagonal by position
    ids the packed row matches the row alone to rounding, far closer than the leaking forward does; where it
    is not (ALiBi models such as Bloom take no position ids), the packed forward is the leaking one. A
    relative bound would not do: at random initialisation a leak moves the states by under 1% of their scale."""
    inner = unwrap(model)
    base = inner.base_model
    device = next(inner.parameters()).device
    other = torch.arange(1, PROBE + 1, device=device) % inner.config.vocab_size
    row = torch.arange(PROBE + 1, 2 * PROBE + 1, device=device) % inner.config.vocab_size
    ids = torch.cat([other, row])[None, :]  # [1, 2 * PROBE]
    positions = torch.arange(PROBE, device=device).repeat(2)[None, :]
    run = lambda ids, positions, mask: base(input_ids=ids, position_ids=positions, attention_mask=mask,
                                            use_cache=False).last_hidden_state[0, -PROBE:].float()  # [PROBE, H]
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            alone = run(row[None, :], positions[:, :PROBE], None)
            packed = run(ids, positions, None)
            leaking = run(ids, positions, torch.ones_like(ids))
    except (TypeError, ValueError) as e:  # a trunk that takes no position ids
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
                        "load the model with an attention that reads packed position ids (sdpa, eager, "
                        "flash_attention_2)")


# The share of a leaking forward's change that a packed row may show: rounding of the rows' different
# attention shapes (zero in fp32 and bf16 on the CPU, tests/train/test_packed.py) stays far below it.
PROBE_SHARE = 0.1
