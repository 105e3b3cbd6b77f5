"""Each phase's settings, built once from the config (`Settings.of`, the one place a phase's settings are
read from it), so a phase's signature says what it depends on and no phase reads the whole config: a
settings object holds typed values, never a section of the config. Frozen: a run's settings do not change
after it starts (the adaptive entropy coefficient is state the update carries, not a setting)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.algo.objectives import objective
from rlvr.config import AlgoConfig, Config, to_dict
from rlvr.device import Determinism, determinism
from rlvr.rollout.engines import EngineSettings, tis_cap_of
from rlvr.rollout.sampling import SamplingSettings
from rlvr.train.batch import AdvantageSettings, KLSettings
from rlvr.train.update import EntropySettings, UpdateSettings


@dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """What collecting a step's batch needs: how many prompts and completions, how they sample."""

    sampling: SamplingSettings  # every model turn of a training rollout (rollout.*)
    prompts_per_step: int
    group_size: int
    seed: int  # train.seed: the per-group sampling seeds
    steps: int  # train.steps: the reward functions' trainer_state.max_steps
    dynamic_sampling: bool  # algo.dynamic_sampling: drop groups with equal rewards and refill
    max_refill: int  # algo.max_refill
    precision: str  # train.mixed_precision resolved: rollouts sample under its autocast
    one_step_off: bool  # rollout.overlap: step k+1's batch collected during step k's update


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """Greedy held-out / OOD evaluation: its sampling, when it runs, where its records go."""

    sampling: SamplingSettings  # greedy, eval.max_new_tokens, the run's stop and pad ids
    batch_size: int
    before: bool
    after: bool
    every: int  # train.eval_every: mid-run held-out evaluations (0: none)
    precision: str  # train.mixed_precision resolved: evaluation samples under the same autocast
    out: Path  # the run directory: eval_before.jsonl, eval_after.jsonl


# The keys that decide what a checkpoint's weights are: under another value the same tensors would be another
# model (a LoRA alpha rescales every adapter, other target modules or rank are other adapters, another dtype or
# 4-bit quantization rounds the base weights), so a resume refuses a change to any of them
# (rlvr.train.checkpoint.restore_checkpoint); a change to any other key is a note. model.name is not one: the
# checkpoint holds every weight, the base's too, so a model directory that moved resumes, and another
# architecture's weights do not load (an error naming the key).
WEIGHT_KEYS = ("model.dtype", "model.quantize", "model.lora.r", "model.lora.alpha", "model.lora.target_modules")


def weight_settings(config: dict) -> dict:
    """WEIGHT_KEYS' values in a config as plain values (to_dict's, or a saved config.yaml's); a key the
    config lacks is left out."""
    out = {}
    for key in WEIGHT_KEYS:
        value = config
        for part in key.split("."):
            value = value.get(part, {}) if isinstance(value, dict) else {}
        if value != {}:
            out[key] = value
    return out


@dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    out: Path  # the run directory (checkpoints/, final/)
    every: int  # train.save_every (0: no checkpoint at all)
    keep: int  # train.keep_checkpoints
    model_name: str  # model.name, model.dtype and model.quantize: what final/ is loaded back from (LoRA: the base)
    model_dtype: str
    model_quantize: str
    weights: dict  # WEIGHT_KEYS' values: recorded in each checkpoint, checked by a resume


@dataclass(frozen=True, kw_only=True)
class LogSettings:
    samples_every: int  # train.samples_every: console samples
    trackers: tuple[str, ...]
    project: str


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A GRPO run's settings by phase."""

    steps: int
    rollout: RolloutSettings
    update: UpdateSettings
    eval: EvalSettings
    checkpoint: CheckpointSettings
    log: LogSettings

    @staticmethod
    def of(cfg: Config, *, stop_ids: list[int], pad_id: int, precision: str) -> Settings:
        """The settings of cfg; stop_ids and pad_id are the tokenizer's, `precision` train.mixed_precision
        resolved for the run's device."""
        r, t, out = cfg.rollout, cfg.train, Path(cfg.train.out)
        sampling = SamplingSettings(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                                    top_k=r.top_k, stop_ids=tuple(stop_ids), pad_id=pad_id)
        return Settings(
            steps=t.steps,
            rollout=RolloutSettings(sampling=sampling, prompts_per_step=r.prompts_per_step, group_size=r.group_size,
                                    seed=t.seed, steps=t.steps, dynamic_sampling=cfg.algo.dynamic_sampling,
                                    max_refill=cfg.algo.max_refill, precision=precision,
                                    one_step_off=r.overlap == "one_step_off"),
            update=update_settings(cfg, pad_id, precision),
            eval=eval_settings(cfg, stop_ids=stop_ids, pad_id=pad_id, precision=precision),
            checkpoint=CheckpointSettings(out=out, every=t.save_every, keep=t.keep_checkpoints,
                                          model_name=cfg.model.name, model_dtype=cfg.model.dtype,
                                          model_quantize=cfg.model.quantize,
                                          weights=weight_settings(to_dict(cfg))),
            log=LogSettings(samples_every=t.samples_every, trackers=tuple(cfg.log.trackers), project=cfg.log.project))


def update_settings(cfg: Config, pad_id: int, precision: str) -> UpdateSettings:
    """The update's settings of cfg; `precision` is train.mixed_precision resolved for the run's device
    (rlvr.device.resolve_precision: "bf16" or "no")."""
    a, r, o = cfg.algo, cfg.rollout, cfg.optimizer
    return UpdateSettings(
        pad_id=pad_id, temperature=r.temperature, mixed_precision=precision, lm_head=cfg.train.lm_head,
        packed=cfg.train.packed, mask_truncated=a.mask_truncated, advantages=advantage_settings(a), kl=kl_settings(a),
        policy_loss=a.policy_loss, objective_knobs=objective(a.policy_loss).knobs_from(a), clip_low=a.clip_low,
        clip_high=a.clip_high, dual_clip=a.dual_clip, ratio_level=a.ratio_level, aggregation=a.aggregation,
        norm_length=a.norm_length or r.max_new_tokens, sampler=sampler_correction(a, tis_cap_of(r)),
        off_policy_mask_threshold=a.off_policy_mask_threshold, top_entropy_quantile=a.top_entropy_quantile,
        entropy=EntropySettings(coef=a.entropy_coef, adaptive=a.adaptive_entropy, target=a.entropy_target,
                                coef_delta=a.entropy_coef_delta, coef_min=a.entropy_coef_min,
                                coef_max=a.entropy_coef_max),
        value_coef=a.value_coef, value_clip=a.value_clip, iterations=a.iterations, max_grad_norm=o.max_grad_norm,
        micro_batch_prompts=o.micro_batch_prompts, micro_batch_tokens=o.micro_batch_tokens,
        ref_sync_every=a.ref_sync_every, ref_mixup=a.ref_mixup)


def advantage_settings(a: AlgoConfig) -> AdvantageSettings:
    """How the advantages are estimated, from the algo section."""
    return AdvantageSettings(estimator=a.adv_estimator, scale=a.adv_scale, eps=a.adv_eps, gamma=a.gamma, lam=a.lam)


def kl_settings(a: AlgoConfig) -> KLSettings:
    """The KL term to the reference, from the algo section."""
    return KLSettings(beta=a.beta, kl_in=a.kl_in, estimator=a.kl_estimator)


def sampler_correction(a: AlgoConfig, tis_cap: float) -> tuple[str, float, float | None]:
    """(mode, C_min, C_max) of the sampler correction: algo.sampler_correction, whose auto is `tis_cap`
    (rollout.tis_cap as resolved: rlvr.rollout.engines.tis_cap_of): token_truncate at the cap, or off."""
    if a.sampler_correction == "auto":
        return ("token_truncate", 0.0, tis_cap) if tis_cap > 0 else ("off", 0.0, None)
    return a.sampler_correction, a.sampler_c_min, a.sampler_c_max


def engine_settings(cfg: Config) -> EngineSettings:
    """What building the rollout engine reads of cfg (rlvr.rollout.engines.make_engine)."""
    return EngineSettings(rollout=cfg.rollout, model_name=cfg.model.name, model_dtype=cfg.model.dtype,
                          model_quantize=cfg.model.quantize, seed=cfg.train.seed)


def determinism_of(cfg: Config) -> Determinism:
    """train.deterministic on the device train.device names (rlvr.device.determinism): read before anything
    starts CUDA or joins a process group, since what it sets is read then."""
    device_type = "cpu" if cfg.train.device == "cpu" or (cfg.train.device == "auto" and not torch.cuda.is_available()) \
        else "cuda"
    return determinism(cfg.train.deterministic, device_type)


def eval_settings(cfg: Config, *, stop_ids: list[int], pad_id: int, precision: str) -> EvalSettings:
    """The evaluation's settings of cfg (rlvr train and rlvr sft)."""
    greedy = SamplingSettings(max_new_tokens=cfg.eval.max_new_tokens, temperature=0.0, stop_ids=tuple(stop_ids),
                              pad_id=pad_id)
    return EvalSettings(sampling=greedy, batch_size=cfg.eval.batch_size, before=cfg.eval.before, after=cfg.eval.after,
                        every=cfg.train.eval_every, precision=precision, out=Path(cfg.train.out))
