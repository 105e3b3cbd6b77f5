"""Checks on a built config that types alone cannot make: ranges, choices, and combinations. Each message
names the key and what it must be."""
from __future__ import annotations

import dataclasses
import math
import urllib.parse

from rlvr.algo import AGGREGATIONS, ESTIMATORS, SAMPLER_MODES
from rlvr.algo.objectives import REGISTRY
from rlvr.config.sections import Config, ConfigError
from rlvr.device import check_device_spec
from rlvr.report.trackers import PACKAGES as TRACKERS




def _one_of(value: str, key: str, choices: tuple[str, ...]) -> tuple[bool, str]:
    return value in choices, f"{key} '{value}' is not one of {', '.join(choices)}"


def _rollout(cfg: Config) -> list[tuple[bool, str]]:
    r, v = cfg.rollout, cfg.rollout.vllm
    return [
        (r.group_size >= 2, "rollout.group_size must be at least 2 (GRPO compares within a group)"),
        (r.prompts_per_step >= 1, "rollout.prompts_per_step must be at least 1"),
        (r.max_new_tokens >= 1, "rollout.max_new_tokens must be at least 1"),
        (r.temperature > 0, "rollout.temperature must be > 0 for training rollouts"),
        (0 < r.top_p <= 1, "rollout.top_p must be in (0, 1]"),
        (r.top_k >= 0, "rollout.top_k must be >= 0 (0 keeps all tokens)"),
        _one_of(r.engine, "rollout.engine", ("builtin", "hf", "vllm")),
        _one_of(r.weights, "rollout.weights", ("auto", "fp32", "bf16", "int8")),
        _one_of(r.overlap, "rollout.overlap", ("none", "one_step_off")),
        (r.weights in ("auto", "fp32") or r.engine != "vllm",
         f"rollout.weights={r.weights} is for the builtin and hf engines; vLLM samples in model.dtype"),
        (not r.compile or (r.engine == "builtin" and r.weights in ("bf16", "int8")),
         "rollout.compile compiles the builtin engine's bf16/int8 rollout copy: set rollout.engine=builtin and "
         "rollout.weights=bf16 or int8, or rollout.compile=false"),
        (r.tis_cap is None or r.tis_cap >= 0, "rollout.tis_cap must be >= 0 (0 disables) or null"),
        (0 < v.gpu_memory_utilization < 1, "rollout.vllm.gpu_memory_utilization must be in (0, 1)"),
        (v.kv_cache_gib is None or v.kv_cache_gib > 0, "rollout.vllm.kv_cache_gib must be > 0 or null"),
        (v.max_model_len >= 0, "rollout.vllm.max_model_len must be >= 0 (0: the model's own)"),
        (v.timeout_s > 0, "rollout.vllm.timeout_s must be > 0"),
        _one_of(v.weight_push, "rollout.vllm.weight_push", ("disk", "nccl")),
        _one_of(v.sync, "rollout.vllm.sync", ("auto", "adapters", "merged")),
        (v.sync != "adapters" or cfg.model.lora.r > 0, "rollout.vllm.sync=adapters pushes LoRA adapters: set "
         "model.lora.r > 0, or rollout.vllm.sync=auto"),
        (v.sync != "adapters" or v.weight_push == "disk" or not v.server_url, "rollout.vllm.sync=adapters pushes "
         "the adapters as files the servers load: set rollout.vllm.weight_push=disk (nccl moves merged weights)"),
        (not v.server_url or r.engine == "vllm", "rollout.vllm.server_url samples from vLLM servers: set "
         "rollout.engine=vllm with it, or leave it empty"),
        *[(url.startswith(("http://", "https://")), f"rollout.vllm.server_url '{url}' must start with http:// "
           "or https://") for url in v.urls()],
        *[_server_address(url) for url in v.urls()],
    ]


def _server_address(url: str) -> tuple[bool, str]:
    """A server URL is its address alone: rlvr adds the routes (/v1/completions, /collective_rpc, ...), so a
    path such as the OpenAI base URL's /v1 would make every route a 404."""
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number from 0 to 65535)
    except ValueError as e:
        return False, f"rollout.vllm.server_url '{url}': {e}"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return False, (f"rollout.vllm.server_url '{url}' must be the server's address alone, without a path: "
                       f"{parts.scheme}://{parts.netloc} (rlvr adds /v1/completions and the other routes)")
    return bool(parts.hostname), f"rollout.vllm.server_url '{url}' names no host"


def _algo(cfg: Config) -> list[tuple[bool, str]]:
    a = cfg.algo
    return [
        (a.iterations >= 1, "algo.iterations must be at least 1"),
        _one_of(a.aggregation, "algo.aggregation", AGGREGATIONS),
        _one_of(a.adv_estimator, "algo.adv_estimator", ESTIMATORS),
        _one_of(a.adv_scale, "algo.adv_scale", ("group", "batch", "none")),
        _one_of(a.ratio_level, "algo.ratio_level", ("token", "sequence")),
        _one_of(a.kl_in, "algo.kl_in", ("loss", "reward")),
        _one_of(a.kl_estimator, "algo.kl_estimator", ("k1", "k2", "k3")),
        (a.clip_low >= 0 and a.clip_high >= 0, "algo.clip_low and algo.clip_high must be >= 0"),
        (a.dual_clip is None or a.dual_clip > 1, "algo.dual_clip must be null or > 1 (Ye et al. 2020)"),
        (a.beta >= 0, "algo.beta must be >= 0"),
        (a.norm_length >= 0 and a.max_refill >= 0, "algo.norm_length and algo.max_refill must be >= 0"),
        (a.ref_sync_every >= 0, "algo.ref_sync_every must be >= 0 (0: never)"),
        (0 < a.ref_mixup <= 1, "algo.ref_mixup must be in (0, 1]"),
        (a.adv_eps > 0, "algo.adv_eps must be > 0: it keeps an all-equal group's advantage 0 instead of 0/0"),
        (0 <= a.gamma <= 1 and 0 <= a.lam <= 1, "algo.gamma and algo.lam must be in [0, 1]"),
    ] + _objective(cfg)


def _objective(cfg: Config) -> list[tuple[bool, str]]:
    """The policy objective, the sampler correction and the token selection."""
    a = cfg.algo
    entry = REGISTRY.get(a.policy_loss)  # what the objective composes with: its registry entry says
    sequence_ratio = ", ".join(name for name, e in REGISTRY.items() if e.sequence_ratio)
    return [
        _one_of(a.policy_loss, "algo.policy_loss", tuple(REGISTRY)),
        (a.ratio_level == "token" or entry is None or entry.sequence_ratio,
         f"algo.ratio_level sequence composes with algo.policy_loss {sequence_ratio}, "
         f"not {a.policy_loss}: set algo.ratio_level=token"),
        (a.adv_estimator != "group_passk" or a.adv_scale in ("group", "none"),
         "algo.adv_scale must be group or none with algo.adv_estimator group_passk"),
        *((False, message) for message in a.knob_problems()),  # each objective's knobs (rlvr.algo.objectives)
        _one_of(a.sampler_correction, "algo.sampler_correction", ("auto", *SAMPLER_MODES)),
        (a.sampler_c_min >= 0 and (a.sampler_c_max is None or a.sampler_c_max > a.sampler_c_min),
         "algo.sampler_c_min must be >= 0 and below algo.sampler_c_max"),
        (a.sampler_c_max is not None or not a.sampler_correction.endswith("truncate"),
         "algo.sampler_c_max must be set for a *_truncate algo.sampler_correction"),
        (a.sampler_correction == "auto" or cfg.rollout.tis_cap is None,
         "rollout.tis_cap is the auto sampler correction: leave it unset (null) when algo.sampler_correction "
         f"is {a.sampler_correction}, and give the cap as algo.sampler_c_max"),
        (entry is None or entry.sequence_correction or not a.sampler_correction.startswith("sequence"),
         f"algo.policy_loss {a.policy_loss} folds per-token sampler weights into its own weight: use "
         "algo.sampler_correction token_truncate or token_mask"),
        (a.off_policy_mask_threshold is None or a.off_policy_mask_threshold >= 0,
         "algo.off_policy_mask_threshold must be null or >= 0"),
        (0 < a.top_entropy_quantile <= 1, "algo.top_entropy_quantile must be in (0, 1]"),
        (not a.adaptive_entropy or a.entropy_coef_min <= a.entropy_coef_max,
         "algo.entropy_coef_min must be <= algo.entropy_coef_max"),
    ]


def _optimizer(cfg: Config) -> list[tuple[bool, str]]:
    o = cfg.optimizer
    return [
        (0 <= o.lr < 1, f"optimizer.lr must be in [0, 1), got {o.lr}: AdamW moves each weight by about lr per step, "
         "so an lr of 1 or more overwrites the weights (typical: 1e-6 to 1e-4)"),
        (o.micro_batch_prompts >= 1, "optimizer.micro_batch_prompts must be at least 1"),
        (o.micro_batch_tokens >= 0, "optimizer.micro_batch_tokens must be >= 0 (0: micro-batch by prompt count)"),
        _one_of(o.state, "optimizer.state", ("fp32", "8bit", "offload")),
    ]


def _rest(cfg: Config) -> list[tuple[bool, str]]:
    t, c, task = cfg.train, cfg.curriculum, cfg.task
    return [
        (cfg.model.dtype in ("float32", "bfloat16", "auto"),
         f"model.dtype '{cfg.model.dtype}' is not one of float32, bfloat16, auto"
         + ("; float16 is not trained in: its range needs loss scaling, which bfloat16 does not"
            if cfg.model.dtype in ("float16", "fp16", "half") else "")),
        (cfg.model.lora.r >= 0, "model.lora.r must be >= 0"),
        (isinstance(cfg.model.lora.target_modules, list) or cfg.model.lora.target_modules == "all-linear",
         f"model.lora.target_modules is a list of layer names (e.g. [q_proj, v_proj]) or all-linear, got "
         f"{cfg.model.lora.target_modules!r}"),
        _one_of(cfg.model.quantize, "model.quantize", ("none", "nf4")),
        (cfg.model.quantize == "none" or cfg.model.lora.r > 0,
         "model.quantize=nf4 freezes the base in 4 bits: it trains LoRA adapters only, so set model.lora.r > 0"),
        (cfg.model.quantize == "none" or cfg.rollout.engine == "vllm" or cfg.rollout.weights in ("auto", "fp32"),
         "model.quantize=nf4 decodes with the policy's own 4-bit weights: use rollout.weights auto or fp32"),
        (cfg.model.quantize == "none" or cfg.rollout.engine != "vllm" or (
            cfg.rollout.vllm.sync != "merged" and (cfg.rollout.vllm.weight_push == "disk" or not cfg.rollout.vllm.server_url)),
         "model.quantize=nf4 with vLLM pushes the LoRA adapters alone (vLLM holds the base in the model's own "
         "dtype): set rollout.vllm.sync auto or adapters, and rollout.vllm.weight_push=disk"),
        (not (cfg.model.lora.r > 0 and cfg.algo.ref_sync_every > 0),
         "algo.ref_sync_every needs a separate reference; with model.lora.r > 0 the reference is the base"),
        (min(task.ood_size, task.train_size, task.few_shot, 0 if task.heldout_size is None else task.heldout_size) >= 0,
         "task.heldout_size, task.ood_size, task.train_size and task.few_shot must be >= 0"),
        _one_of(c.mode, "curriculum.mode", ("none", "schedule", "adaptive")),
        (0 <= c.band_low < c.band_high <= 1,
         "curriculum.band_low and band_high must satisfy 0 <= band_low < band_high <= 1"),
        (0 < c.smoothing <= 1, "curriculum.smoothing must be in (0, 1]"),
        (bool(cfg.rewards.weights), "rewards.weights must name at least one reward function"),
        *[(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w),
           f"rewards.weights: the weight of {name!r} must be a finite number, got {w!r}")
          for name, w in cfg.rewards.weights.items()],
        (cfg.rewards.timeout_s >= 0, "rewards.timeout_s must be >= 0 (0: no limit)"),
        (t.steps >= 0, "train.steps must be >= 0"),
        (cfg.sft.batch_size >= 1, "sft.batch_size must be at least 1"),
        (min(t.save_every, t.eval_every, t.samples_every, t.threads) >= 0,
         "train.save_every, train.eval_every, train.samples_every and train.threads must be >= 0"),
        _one_of(t.parallel, "train.parallel", ("ddp", "fsdp")),
        (t.join_timeout_s > 0, "train.join_timeout_s must be > 0"),
        (set(cfg.log.trackers) <= set(TRACKERS),  # at build time, before a run directory is touched
         f"unknown tracker in log.trackers {cfg.log.trackers}: each one of {', '.join(TRACKERS)}"),
        _one_of(t.mixed_precision, "train.mixed_precision", ("auto", "no", "bf16")),
        _one_of(t.deterministic, "train.deterministic", ("auto", "on", "off")),
        _one_of(t.lm_head, "train.lm_head", ("auto", "fused", "chunked")),
        (check_device_spec(t.device) is None, check_device_spec(t.device) or ""),
        (cfg.eval.max_new_tokens >= 1 and cfg.eval.batch_size >= 1,
         "eval.max_new_tokens and eval.batch_size must be at least 1"),
    ]


def _env(cfg: Config) -> list[tuple[bool, str]]:
    e = cfg.env
    roles = [m.get("role") for m in e.example]
    return [
        (e.name in ("single", "tools") or ":" in e.name,
         f"env.name '{e.name}' is not one of single, tools, or a 'module:Class' environment"),
        (e.max_turns >= 1, "env.max_turns must be at least 1"),
        (e.tool_budget_s > 0, "env.tool_budget_s must be positive"),
        (e.max_tool_tokens >= 1 and e.max_episode_tokens >= 1, "env.max_tool_tokens and env.max_episode_tokens must be at least 1"),
        (all(set(m) == {"role", "content"} for m in e.example),
         "env.example: every turn is a mapping with exactly the keys role and content"),
        (all(r in ("system", "user", "assistant", "tool") for r in roles),
         f"env.example: a role is one of system, user, assistant, tool; got {roles}"),
    ]


def _finite(node, prefix: str = "") -> list[tuple[bool, str]]:
    """Every float key holds a number: NaN passes every `>=` check as False but is refused by none of
    the range checks written as `not (x < lo)`, and inf is no setting's meaning."""
    checks = []
    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            checks += _finite(value, key + ".")
        elif isinstance(value, float) and not math.isfinite(value):
            checks.append((False, f"{key} must be a finite number, got {value}"))
    return checks


def validate(cfg: Config) -> None:
    """Raise ConfigError naming the first key whose value cannot work."""
    for ok, message in _finite(cfg) + _rollout(cfg) + _algo(cfg) + _optimizer(cfg) + _env(cfg) + _rest(cfg):
        if not ok:
            raise ConfigError(message)
