"""Next-token sampling: a pure function from logits to tokens and their log-probabilities."""
from __future__ import annotations

import torch


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    logits: [B, V] raw next-token logits.
    Returns (tokens [B], logp [B]) where logp is the log-probability of each token under the
    distribution it was drawn from (after temperature, top-k and top-p), so that with one policy
    update per batch it is the behaviour policy's log-probability. temperature == 0 is greedy and
    reports the untempered log-probability of the argmax.
    """
    logits = logits.float()
    if temperature == 0:
        logp_all = torch.log_softmax(logits, dim=-1)  # [B, V]
        tokens = logits.argmax(dim=-1)  # [B]
        return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits / temperature  # [B, V]
    if top_k > 0 and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)  # [B, V]
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token once the mass before it already reaches top_p; the first token always stays.
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V]
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    logp_all = torch.log_softmax(scaled, dim=-1)  # [B, V]
    tokens = inverse_cdf(logp_all.exp(), generator)  # [B]
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of probs [B, V]: the first index whose cumulative mass exceeds u ~ U[0, mass).
    The same distribution as torch.multinomial at a tenth of its cost on a CPU for a 49k vocabulary;
    a token of probability 0 is never drawn (its cumulative mass equals its predecessor's)."""
    cdf = probs.cumsum(dim=-1)  # [B, V]
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=cdf.dtype) * cdf[:, -1:]  # [B, 1]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)  # [B]
