"""The LM head's scoring: each completion token's log-probability (and, when asked, the entropy of the
tempered next-token distribution) from the states that predict it, in chunks of tokens so that the
[tokens, vocabulary] logits are never held at once; the training forwards (rlvr/train/forward.py) run the
trunk and hand their states here.

    token_logprobs(hidden, head, tokens, ...)  chunked (the log-softmax kept for the backward, or recomputed
                                               under checkpointing), or fused=True: FusedHeadLogprob
    use_fused_head(train.lm_head, device)      which of the two a run's update uses
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def token_logprobs(hidden: torch.Tensor, head: torch.nn.Module, tokens: torch.Tensor, temperature: float = 1.0,
                   chunk: int = 256, with_entropy: bool = False, entropy_grad: bool = False, fused: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [N, H] predicts tokens [N]; returns (log p(token) [N] fp32, entropy [N] or None),
    `chunk` rows of logits at a time. The entropy carries a gradient only with `entropy_grad` (an
    entropy bonus in the loss); as a metric it is computed from detached log-probs, so autograd keeps
    no [N, V] tensors for it.

    fused (train.lm_head, for a plain nn.Linear head): FusedHeadLogprob, which keeps no [N, V] tensor for
    the backward pass and recomputes each chunk's logits there; its values are these exactly, its
    gradients equal within rounding. Otherwise, on CUDA with a gradient, each chunk runs under activation
    checkpointing: the backward pass recomputes the chunk's logits, so only hidden and tokens are kept
    (152k-word vocabularies would otherwise hold N x V x 4 bytes per micro-batch). On the CPU the chunks'
    log-probs are kept: recomputing the head would cost a small model a large share of its step."""
    if fused and type(head) is torch.nn.Linear:
        logp, ent = FusedHeadLogprob.apply(hidden, head.weight, head.bias, tokens, temperature, chunk, with_entropy,
                                           entropy_grad)
        return logp, (ent if with_entropy else None)

    def piece(h: torch.Tensor, t: torch.Tensor):
        logits = head(h).float()  # [n, V]
        if temperature != 1.0:
            logits = logits / temperature
        logp_all = logits.log_softmax(-1)
        logp = logp_all.gather(-1, t[:, None]).squeeze(-1)  # [n]
        if not with_entropy:
            return logp, None
        src = logp_all if entropy_grad else logp_all.detach()
        return logp, -(src.exp() * src).sum(-1)

    recompute = hidden.is_cuda and hidden.requires_grad and torch.is_grad_enabled()
    out, ent = [], []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start:start + chunk], tokens[start:start + chunk]
        logp, e = checkpoint(piece, h, t, use_reentrant=False) if recompute else piece(h, t)
        out.append(logp)
        if with_entropy:
            ent.append(e)
    if not out:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    return torch.cat(out), (torch.cat(ent) if with_entropy else None)


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype nn.Linear would multiply in here: autocast's where it is on, else the weight's."""
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else weight.dtype


class FusedHeadLogprob(torch.autograd.Function):
    """The LM head, log-softmax, the token's log-prob (and the entropy) over chunks of `chunk` tokens,
    never holding [N, V] logits: the forward keeps hidden, weight and tokens only, and the backward
    recomputes each chunk's logits and writes its gradient straight into grad_hidden and grad_weight.

    forward(hidden [N, H], weight [V, H], bias [V] or None, tokens [N], temperature, chunk, with_entropy,
    entropy_grad) -> (log p(token) [N] fp32, entropy [N] fp32, empty without with_entropy). The values
    are token_logprobs' unfused ones bit for bit (the same ops per chunk); the products run in the dtype
    nn.Linear would use (autocast's, else the weight's). Per chunk, with z the tempered logits, p their
    softmax and T the temperature: d logp / dz = onehot(token) - p; d entropy / dz = -p (log p + entropy);
    d / dlogits = that / T."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk, with_entropy, entropy_grad):
        dtype = _compute_dtype(hidden, weight)
        w, b = weight.to(dtype), (bias.to(dtype) if bias is not None else None)
        logps, ents = [], []
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], chunk):
                logits = F.linear(hidden[start:start + chunk].to(dtype), w, b).float()  # [n, V]
                if temperature != 1.0:
                    logits = logits / temperature
                logp_all = logits.log_softmax(-1)
                logps.append(logp_all.gather(-1, tokens[start:start + chunk, None]).squeeze(-1))
                if with_entropy:
                    ents.append(-(logp_all.exp() * logp_all).sum(-1))
        logp = torch.cat(logps) if logps else hidden.new_zeros(0, dtype=torch.float32)
        ent = torch.cat(ents) if ents else logp.new_zeros(0)
        ctx.save_for_backward(hidden, weight, bias, tokens)
        ctx.dtype, ctx.temperature, ctx.chunk = dtype, temperature, chunk
        ctx.entropy_grad = with_entropy and entropy_grad
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, bias, tokens = ctx.saved_tensors
        dtype, temperature, chunk = ctx.dtype, ctx.temperature, ctx.chunk
        w, b = weight.to(dtype), (bias.to(dtype) if bias is not None else None)
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) \
            if bias is not None and ctx.needs_input_grad[2] else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], chunk):
                h = hidden[start:start + chunk].to(dtype)
                t = tokens[start:start + chunk]
                logits = F.linear(h, w, b).float()
                if temperature != 1.0:
                    logits = logits / temperature
                logp_all = logits.log_softmax(-1)
                del logits
                p = logp_all.exp()  # [n, V]
                extra = None
                if ctx.entropy_grad and g_ent is not None:  # -g_ent p (log p + entropy), in logp_all's memory
                    ent = -(p * logp_all).sum(-1, keepdim=True)  # [n, 1]
                    extra = logp_all.add_(ent).mul_(p).mul_(-g_ent[start:start + chunk, None])
                del logp_all
                g = g_logp[start:start + chunk, None]
                dz = p.mul_(-g)  # -g p, and + g at the token
                dz.scatter_add_(-1, t[:, None], g)
                if extra is not None:
                    dz.add_(extra)
                    del extra
                if temperature != 1.0:
                    dz.div_(temperature)
                dz = dz.to(dtype)
                if grad_h is not None:
                    grad_h[start:start + chunk] = (dz @ w).to(hidden.dtype)
                if grad_w is not None:
                    grad_w.add_((dz.t() @ h).float())
                if grad_b is not None:
                    grad_b.add_(dz.float().sum(0))
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None, None


def use_fused_head(lm_head: str, device: torch.device) -> bool:
    """train.lm_head -> whether the update's forward scores tokens with FusedHeadLogprob: fused, chunked, or
    auto: fused on CUDA (at a 152k vocabulary the saved log-softmax is N x V x 4 bytes per micro-batch);
    on the CPU the chunked path, whose gradients the default run has always had (bench/lm_head.py measured
    the fused one no faster there at the demo's shapes: 0.999x the time, 0.78x the memory)."""
    return lm_head == "fused" or (lm_head == "auto" and device.type == "cuda")
