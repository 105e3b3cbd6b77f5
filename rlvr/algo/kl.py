"""Per-token KL estimators between the policy and a reference (Schulman, "Approximating KL divergence")."""
from __future__ import annotations

import torch


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """logp, ref_logp: [B, T] log-probs of the sampled tokens -> [B, T] estimate of KL(policy || ref).

    k1 = logp - ref; k2 = (logp - ref)^2 / 2; k3 = exp(ref - logp) - (ref - logp) - 1 (unbiased, >= 0).
    """
    diff = ref_logp - logp  # [B, T]
    if kind == "k1":
        return -diff
    if kind == "k2":
        return diff.pow(2) / 2
    if kind == "k3":
        return diff.exp() - diff - 1
    raise ValueError(f"kind must be k1, k2 or k3, got {kind!r}")


def split_beta(beta: float, kl_in: str) -> tuple[float, float]:
    """algo.beta and algo.kl_in -> (the KL coefficient in the loss, the one in the reward): the one
    place where kl_in is read."""
    if kl_in not in ("loss", "reward"):
        raise ValueError(f"kl_in must be loss or reward, got {kl_in!r}")
    return (beta, 0.0) if kl_in == "loss" else (0.0, beta)
