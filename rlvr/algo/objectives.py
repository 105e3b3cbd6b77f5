"""Policy objectives, each a per-token loss [B, T] before aggregation (the same `aggregate` reduces every
one of them), and REGISTRY: for each objective (algo.policy_loss) its loss, its own knobs as a dataclass,
whether GSPO's sequence ratio composes with it and whether it folds the sampler weights in itself.
Adding an objective is one entry here: the config's keys and help (rlvr/config/algo.py), the presets'
knob values, the update and the validation read the registry.

ratio is the importance ratio pi / pi_old as `losses.policy_ratio` builds it ([B, T]: per token, or GSPO's
sequence ratio spread over its tokens); advantages are [B, T]. Token weights (the sampler correction,
token selection) multiply the returned losses, except where the registry says the objective folds them in.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from rlvr.algo.losses import LOG_RATIO_LIMIT, clipped_surrogate


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x [B, T] over mask [B, T] (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def cispo_loss(logp: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float,
               clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1, Chen et al. 2025): -sg[clip(r, 1 - clip_low, 1 + clip_high)] * A * log pi.

    Every token keeps its gradient (A * the clipped weight * d log pi); only the weight is clipped. clip_low
    >= 1 leaves the weight without a lower bound (the paper's choice; TRL's `epsilon_high` is 1 + clip_high).
    Returns (loss [B, T], clipped [B, T] bool: where the weight was clipped)."""
    weight = ratio.detach().clamp(1 - clip_low, 1 + clip_high)  # [B, T]
    return -weight * advantages * logp, weight != ratio.detach()


def sapo_loss(ratio: torch.Tensor, advantages: torch.Tensor, tau_pos: float = 1.0,
              tau_neg: float = 1.05) -> torch.Tensor:
    """SAPO (Gao et al. 2025): a soft gate instead of the hard clip, -f(r) * A with f(r) =
    sigmoid(tau (r - 1)) * 4 / tau; tau_pos where A > 0, tau_neg elsewhere. f(1) = 2 / tau and f'(1) = 1,
    so near the old policy it is the plain policy gradient; far from it the gradient fades smoothly. [B, T]."""
    tau = torch.where(advantages > 0, torch.as_tensor(tau_pos, dtype=ratio.dtype),
                      torch.as_tensor(tau_neg, dtype=ratio.dtype))  # [B, T]
    return -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * advantages


def gmpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              clip_low: float = 0.4, clip_high: float = 0.4, weights: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """GMPO (Zhao et al. 2025): the geometric mean of the token ratios, clipped per token in log space:
    -A_i * exp(mean_t sgn(A) min(sgn(A) log r_t, sgn(A) clip(log r_t, -clip_low, clip_high))).

    One loss per sequence, spread over its tokens ([B, T], the same value at each), so that the
    seq-mean-token-mean aggregation is the paper's mean over sequences. A [B, T] advantage is averaged
    over the sequence. weights [B, T] (the sampler correction) enter as their geometric mean per sequence,
    as verl's geo_mean does. Returns (loss [B, T], clipped [B, T] bool)."""
    m = mask.to(logp.dtype)
    n = m.sum(-1) + 1e-8  # [B] the epsilon verl adds, so fully masked rows give 0, not nan
    log_r = logp - old_logp  # [B, T]
    sign = torch.sign(advantages)
    log_r_clip = log_r.clamp(-clip_low, clip_high)
    kept = sign * torch.minimum(sign * log_r, sign * log_r_clip)  # [B, T]
    seq_ratio = torch.exp((kept * m).sum(-1) / n)  # [B]
    seq_adv = (advantages * m).sum(-1) / n  # [B]
    loss = -seq_adv * seq_ratio  # [B]
    if weights is not None:
        loss = loss * torch.exp((torch.log(weights + 1e-10) * m).sum(-1) / n)
    return loss[:, None].expand_as(logp), log_r != log_r_clip


def gpg_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """GPG (Chu et al. 2025): the plain policy gradient, -A * log pi, no ratio and no clip. [B, T]."""
    return -advantages * logp


def clip_cov_loss(surrogate: torch.Tensor, clipped: torch.Tensor, logp: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, cov_ratio: float = 2e-4, cov_lb: float = 1.0, cov_ub: float = 5.0,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov (Cui et al. 2025, "The entropy mechanism of RL for reasoning LMs"): the clipped
    surrogate with the gradient of a few high-covariance tokens removed. Among the real tokens the clip
    left alone whose centred (A - mean A) (log pi - mean log pi) lies in (cov_lb, cov_ub), a random
    max(1, int(cov_ratio * real tokens)) get loss 0. That count is a number of tokens, so it is read on
    the host here.

    surrogate [B, T]: the clipped surrogate's per-token loss; clipped [B, T] bool: where the clip acted.
    Returns (loss [B, T], dropped [B, T] bool)."""
    real = mask.bool()
    cov = (advantages - masked_mean(advantages, mask)) * (logp.detach() - masked_mean(logp.detach(), mask))
    eligible = (cov < cov_ub) & (cov > cov_lb) & real & ~clipped  # [B, T]
    n_pick = max(int(cov_ratio * int(real.sum())), 1)
    where = torch.nonzero(eligible)  # [K, 2]
    where = where[torch.randperm(len(where), generator=generator)[:n_pick]] if len(where) else where
    dropped = torch.zeros_like(real)
    dropped[where[:, 0], where[:, 1]] = True
    return surrogate * ~dropped, dropped


def kl_cov_loss(ratio: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, cov_ratio: float = 2e-4, kl_coef: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-Cov (Cui et al. 2025): the unclipped surrogate -A r, plus kl_coef * |log pi - log pi_old| on the
    max(1, int(cov_ratio * real tokens)) real tokens of largest centred covariance (A - mean A)(log pi -
    mean log pi): a KL penalty exactly where entropy collapses fastest. Returns (loss [B, T], penalised
    [B, T] bool)."""
    real = mask.bool()
    flat = real.flatten().nonzero().squeeze(-1)  # [N] real token positions
    a, lp = advantages.detach().flatten()[flat], logp.detach().flatten()[flat]
    cov = (a - a.mean()) * (lp - lp.mean())  # [N]
    penalised = torch.zeros(real.numel(), dtype=torch.bool, device=real.device)
    if len(flat):
        top = torch.topk(cov, max(1, int(len(cov) * cov_ratio))).indices
        penalised[flat[top]] = True
    penalised = penalised.view_as(real)
    loss = -advantages * ratio + penalised * kl_coef * (logp - old_logp).abs()
    return loss, penalised


def vespo_weights(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  sampler_weights: torch.Tensor | None = None, k_pos: float = 2.0, lambda_pos: float = 3.0,
                  k_neg: float = 3.0, lambda_neg: float = 2.0) -> torch.Tensor:
    """VESPO's gamma weight of each sequence, no gradient: phi(w) = e^lam w^k e^(-lam w) (phi(1) = 1), w the
    sequence's whole importance ratio prod_t pi / pi_old, times the sampler correction's token weights
    when given (TRL's get_gamma_weights). k, lam are the positive-advantage pair where A >= 0.
    advantages [B, 1] or [B, T]; returns phi [B, 1] (or [B, T] with per-token advantages)."""
    floor = -18.420680743952367  # log(1e-8): TRL's floor for log w, so a masked token gives w ~ 1e-8
    with torch.no_grad():
        m = mask.to(logp.dtype)
        log_w = ((logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT) * m).sum(-1, keepdim=True)  # [B, 1]
        if sampler_weights is not None:
            log_w = log_w + (torch.log(sampler_weights).clamp(floor, LOG_RATIO_LIMIT) * m).sum(-1, keepdim=True)
        log_w = log_w.clamp(floor, LOG_RATIO_LIMIT)
        pos = advantages >= 0
        k = torch.where(pos, k_pos, k_neg).to(logp.dtype)
        lam = torch.where(pos, lambda_pos, lambda_neg).to(logp.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_loss(logp: torch.Tensor, advantages: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """VESPO (TRL's `vespo`): -phi * A * log pi, phi the detached gamma weight of `vespo_weights`. [B, T]."""
    return -phi * advantages * logp


# --- each objective's knobs: config keys of the `algo` section; the attribute docstrings are their help ---

@dataclass(kw_only=True)
class NoKnobs:
    """An objective with no knobs of its own."""

    def knob_problems(self) -> list[str]:
        """What is wrong with these values, each naming its key (none: [])."""
        return []


@dataclass(kw_only=True)
class SapoKnobs(NoKnobs):
    sapo_tau_pos: float = 1.0
    """sapo: gate temperature for tokens with a positive advantage."""
    sapo_tau_neg: float = 1.05
    """sapo: gate temperature for the others (steeper: negative updates fade sooner)."""

    def knob_problems(self) -> list[str]:
        return [] if self.sapo_tau_pos > 0 and self.sapo_tau_neg > 0 else [
            "algo.sapo_tau_pos and algo.sapo_tau_neg must be > 0"]


@dataclass(kw_only=True)
class CovKnobs(NoKnobs):
    cov_ratio: float = 2e-4
    """clip_cov and kl_cov: the share of real tokens (at least one) whose gradient is dropped or penalised."""

    def knob_problems(self) -> list[str]:
        return [] if 0 < self.cov_ratio <= 1 else ["algo.cov_ratio must be in (0, 1]"]


@dataclass(kw_only=True)
class ClipCovKnobs(CovKnobs):
    clip_cov_lb: float = 1.0
    """clip_cov: only tokens whose covariance exceeds this are candidates."""
    clip_cov_ub: float = 5.0
    """clip_cov: only tokens whose covariance is below this are candidates."""

    def knob_problems(self) -> list[str]:
        return super().knob_problems() + ([] if self.clip_cov_lb < self.clip_cov_ub else [
            "algo.clip_cov_lb must be below algo.clip_cov_ub"])


@dataclass(kw_only=True)
class KlCovKnobs(CovKnobs):
    kl_cov_coef: float = 1.0
    """kl_cov: weight of the |log pi - log pi_old| penalty on the selected tokens (1: the paper's recipe,
    verl's recipe/entropy ppo_kl_coef=1; verl's PolicyLossConfig default is 0.1)."""


@dataclass(kw_only=True)
class VespoKnobs(NoKnobs):
    vespo_k_pos: float = 2.0
    """vespo: shape k of the gamma weight for non-negative advantages."""
    vespo_lambda_pos: float = 3.0
    """vespo: rate lambda of the gamma weight for non-negative advantages."""
    vespo_k_neg: float = 3.0
    """vespo: shape k for negative advantages."""
    vespo_lambda_neg: float = 2.0
    """vespo: rate lambda for negative advantages."""


# --- the registry ---

@dataclass(frozen=True, kw_only=True)
class Inputs:
    """What an objective may read, for one batch: log-probs under the policy and the old policy, the ratio,
    the advantages, the mask ([B, T] each), the clip range, and the sampler weights [B, T] (None: none)."""

    logp: torch.Tensor
    old_logp: torch.Tensor
    ratio: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    clip_low: float
    clip_high: float
    dual_clip: float | None
    sampler_w: torch.Tensor | None
    generator: torch.Generator | None


class Terms(NamedTuple):
    """An objective's per-token loss [B, T], where a dual clip acted and the tokens it clipped, dropped or
    penalised (bool [B, T]; None: none)."""

    loss: torch.Tensor
    dual: torch.Tensor | None = None
    touched: torch.Tensor | None = None


@dataclass(frozen=True, kw_only=True)
class Objective:
    """One algo.policy_loss: its loss, its knobs, what it composes with, its help and its preset. Everything
    else that names the objectives reads this registry: the config's keys and `--help` (rlvr/config/algo.py),
    the presets (rlvr/algo/presets.py), the checks of a config (rlvr/config/validate.py)."""

    loss: Callable[[Inputs, NoKnobs], Terms]
    knobs: type[NoKnobs] = NoKnobs
    sequence_ratio: bool = False  # GSPO's sequence ratio (algo.ratio_level=sequence) composes with it
    folds_sampler_weights: bool = False  # its loss takes the sampler weights in; the caller must not multiply
    sequence_correction: bool = True  # composes with a sequence_* algo.sampler_correction (False: token weights only)
    help: str = ""  # what it is, in a few words: algo.policy_loss's help
    # the algo keys of the preset of its name, besides policy_loss and its knobs at their defaults (None: no preset)
    preset: Mapping[str, object] | None = None

    def knobs_from(self, source: object) -> NoKnobs:
        """The knobs read from `source`'s attributes of the same names (the algo section): every one is read,
        so a knob the source lacks is an AttributeError, never its default."""
        return self.knobs(**{f.name: getattr(source, f.name) for f in dataclasses.fields(self.knobs)})

    def knobs_of(self, params: NoKnobs | Mapping[str, float] | None) -> NoKnobs:
        """Knobs given as an instance, or as a mapping by name over the defaults; a name that is no
        objective's knob is a ValueError (a mapping may hold other objectives' knobs)."""
        if isinstance(params, self.knobs):
            return params
        if isinstance(params, NoKnobs):
            return self.knobs_from(params)
        params = dict(params or {})
        unknown = sorted(set(params) - set(KNOB_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown objective knob {', '.join(unknown)}: one of {', '.join(KNOB_DEFAULTS)}")
        own = {f.name for f in dataclasses.fields(self.knobs)}
        return self.knobs(**{k: v for k, v in params.items() if k in own})


def _ppo(x: Inputs, k: NoKnobs) -> Terms:
    loss, dual = clipped_surrogate(x.ratio, x.advantages, x.clip_low, x.clip_high, x.dual_clip)
    return Terms(loss, dual=dual)


def _cispo(x: Inputs, k: NoKnobs) -> Terms:
    loss, clipped = cispo_loss(x.logp, x.ratio, x.advantages, x.clip_low, x.clip_high)
    return Terms(loss, touched=clipped)


def _sapo(x: Inputs, k: SapoKnobs) -> Terms:
    return Terms(sapo_loss(x.ratio, x.advantages, k.sapo_tau_pos, k.sapo_tau_neg))


def _gmpo(x: Inputs, k: NoKnobs) -> Terms:
    loss, clipped = gmpo_loss(x.logp, x.old_logp, x.advantages, x.mask, x.clip_low, x.clip_high, x.sampler_w)
    return Terms(loss, touched=clipped)


def _gpg(x: Inputs, k: NoKnobs) -> Terms:
    return Terms(gpg_loss(x.logp, x.advantages))


def _clip_cov(x: Inputs, k: ClipCovKnobs) -> Terms:
    surrogate, _ = clipped_surrogate(x.ratio, x.advantages, x.clip_low, x.clip_high)
    adv = x.advantages
    clipped = (-adv * x.ratio.clamp(1 - x.clip_low, 1 + x.clip_high) > -adv * x.ratio) & x.mask.bool()
    loss, dropped = clip_cov_loss(surrogate, clipped, x.logp, adv, x.mask, k.cov_ratio, k.clip_cov_lb,
                                  k.clip_cov_ub, x.generator)
    return Terms(loss, touched=dropped)


def _kl_cov(x: Inputs, k: KlCovKnobs) -> Terms:
    loss, penalised = kl_cov_loss(x.ratio, x.logp, x.old_logp, x.advantages, x.mask, k.cov_ratio, k.kl_cov_coef)
    return Terms(loss, touched=penalised)


def _vespo(x: Inputs, k: VespoKnobs) -> Terms:
    phi = vespo_weights(x.logp, x.old_logp, x.advantages, x.mask, x.sampler_w, k.vespo_k_pos, k.vespo_lambda_pos,
                        k.vespo_k_neg, k.vespo_lambda_neg)
    return Terms(vespo_loss(x.logp, x.advantages, phi))


# GSPO's sequence ratio composes with the objectives whose papers (or TRL's importance_sampling_level) put it
# in place of the token ratio; gmpo and vespo define their own sequence quantity, gpg and *_cov none.
# A preset's choices cite where they come from.
_GROUP = {"adv_estimator": "group", "adv_scale": "group"}
REGISTRY: dict[str, Objective] = {
    "ppo": Objective(loss=_ppo, sequence_ratio=True, help="the clipped surrogate"),
    # CISPO (MiniMax-M1, Chen et al. 2025): the importance weight clipped and detached, every token keeps its
    # gradient; no lower bound, upper bound 1 + 4 (ScaleRL's epsilon_max 5, TRL's recommendation), token mean.
    "cispo": Objective(loss=_cispo, sequence_ratio=True,
                       help="clipped, detached importance weight times log pi: MiniMax-M1",
                       preset={**_GROUP, "aggregation": "token-mean", "clip_low": 1.0, "clip_high": 4.0, "beta": 0.0,
                               "ratio_level": "token"}),
    # SAPO (Gao et al. 2025): soft gates, tau 1.0 / 1.05, per-sequence token mean (verl forces it, TRL's sapo).
    "sapo": Objective(loss=_sapo, knobs=SapoKnobs, sequence_ratio=True, help="a sigmoid gate instead of the clip",
                      preset={**_GROUP, "aggregation": "seq-mean-token-mean", "beta": 0.0, "ratio_level": "token"}),
    # GMPO (Zhao et al. 2025): geometric mean of token ratios, log-space clip (e^-0.4, e^0.4), mean over sequences.
    "gmpo": Objective(loss=_gmpo, folds_sampler_weights=True,
                      help="geometric mean of token ratios, clipped in log space",
                      preset={**_GROUP, "aggregation": "seq-mean-token-mean", "clip_low": 0.4, "clip_high": 0.4,
                              "beta": 0.0, "ratio_level": "token"}),
    # GPG (Chu et al. 2025): -A log pi with its own advantage (group-centred, no std, scaled by B / non-zero).
    "gpg": Objective(loss=_gpg, help="plain -A log pi",
                     preset={"adv_estimator": "gpg", "aggregation": "token-mean", "beta": 0.0, "ratio_level": "token"}),
    # Clip-Cov and KL-Cov (Cui et al. 2025): 0.02% of tokens; Clip-Cov's band (1, 5) and KL-Cov's coefficient
    # 1 (the knobs' defaults), with the paper's clip-higher for Clip-Cov.
    "clip_cov": Objective(loss=_clip_cov, knobs=ClipCovKnobs,
                          help="the clipped surrogate less a few high-covariance tokens' gradient",
                          preset={**_GROUP, "aggregation": "token-mean", "clip_low": 0.2, "clip_high": 0.28,
                                  "beta": 0.0, "ratio_level": "token"}),
    "kl_cov": Objective(loss=_kl_cov, knobs=KlCovKnobs,
                        help="the clipped surrogate plus a KL penalty on a few high-covariance tokens",
                        preset={**_GROUP, "aggregation": "token-mean", "beta": 0.0, "ratio_level": "token"}),
    # VESPO (TRL's vespo): a gamma weight of the whole sequence ratio (k, lambda = 2, 3 and 3, 2), token mean. It
    # folds per-token sampler weights into that sequence weight, so a sequence-level correction has no place.
    "vespo": Objective(loss=_vespo, knobs=VespoKnobs, folds_sampler_weights=True, sequence_correction=False,
                       help="a gamma weight of the sequence ratio times log pi",
                       preset={**_GROUP, "aggregation": "token-mean", "beta": 0.0, "ratio_level": "token"}),
}


def objective(name: str) -> Objective:
    """The registry's entry for `name`; any other name is a ValueError (never a default objective)."""
    if name not in REGISTRY:
        raise ValueError(f"algo.policy_loss must be one of {', '.join(REGISTRY)}, got {name!r}")
    return REGISTRY[name]


def _knob_classes() -> list[type[NoKnobs]]:
    seen: list[type[NoKnobs]] = []
    for entry in REGISTRY.values():
        if entry.knobs not in seen and entry.knobs is not NoKnobs:
            seen.append(entry.knobs)
    return seen


# Every objective's knobs in one dataclass, the registry's order (the config's algo section inherits it, so
# each knob is a key): a class over the knob classes, last first, so that its fields come in registry order.
def _all_problems(self) -> list[str]:
    return list(dict.fromkeys(m for k in _knob_classes() for m in k.knob_problems(self)))


AllKnobs = dataclass(kw_only=True)(type("AllKnobs", tuple(reversed(_knob_classes())),
                                        {"knob_problems": _all_problems, "__doc__": "Every objective's knobs."}))
KNOB_DEFAULTS: dict[str, float] = {f.name: f.default for f in dataclasses.fields(AllKnobs)}


def knob_defaults(name: str) -> dict[str, float]:
    """`name`'s knobs at their defaults, by key (what a preset of that objective sets)."""
    return dataclasses.asdict(objective(name).knobs())
