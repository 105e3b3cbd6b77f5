"""Run configuration: nested dataclasses whose attribute docstrings are the documentation.

A config is built from defaults, then a YAML file, then dotted command-line overrides
(`--rollout.group_size=16`). Unknown keys and wrongly typed values are errors that name the key.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from rlvr.errors import RlvrError


class ConfigError(RlvrError):
    pass


@dataclass
class LoraConfig:
    r: int = 0
    """LoRA rank (PEFT); 0 trains every weight. With LoRA the reference is the base with adapters off."""
    alpha: int = 16
    """LoRA alpha (scale alpha / r)."""
    dropout: float = 0.0
    """LoRA dropout."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Linear layers that get adapters."""


@dataclass
class ModelConfig:
    name: str = "smollm2-135m-instruct"
    """Built-in name (smollm2-135m-instruct, tiny-random) or a local Hugging Face model directory."""
    dtype: str = "float32"
    """Parameter dtype for training: float32 or bfloat16."""
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    """Task source: arithmetic, reasoning_gym:<dataset>, or a file (.jsonl, .csv, .parquet, or a
    directory written by datasets' save_to_disk)."""
    params: dict[str, object] = field(default_factory=dict)
    """reasoning_gym: the dataset's own settings (e.g. {min_digits: 1, max_digits: 2})."""
    ood_name: str = ""
    """OOD source: empty takes the same task at its harder setting (ood_digits, ood_params, ood_file);
    otherwise another task name, e.g. reasoning_gym:chain_sum."""
    ood_params: dict[str, object] = field(default_factory=dict)
    """reasoning_gym: settings of the OOD split (its harder difficulty)."""
    heldout_file: str = ""
    """File tasks: held-out rows; empty carves task.heldout_size rows out of the train file."""
    ood_file: str = ""
    """File tasks: out-of-distribution rows; empty leaves OOD empty unless task.ood_name is set."""
    columns: dict[str, str] = field(default_factory=dict)
    """File tasks: column mapping, e.g. {prompt: question, answer: final}; keys prompt, answer, tests,
    difficulty, solution; unmapped keys use the column of the same name when present."""
    prompt_template: str = "{prompt}"
    """User turn built from the problem; {prompt} is the problem text."""
    digits: int = 1
    """Arithmetic: most digits in each operand of the train and held-out splits."""
    operands: int = 2
    """Arithmetic: number of operands in the train and held-out splits."""
    operators: str = "+-*"
    """Arithmetic: operators to draw from, any of + - *."""
    ood_digits: int = 2
    """Arithmetic: digits per operand of the out-of-distribution split."""
    ood_operands: int = 2
    """Arithmetic: operands of the out-of-distribution split."""
    heldout_size: int = 100
    """Problems in the held-out split (same difficulty as train, never trained on)."""
    ood_size: int = 100
    """Problems in the out-of-distribution split."""
    train_size: int = 0
    """Problems in the train split; 0 takes every remaining problem of the train difficulty."""
    few_shot: int = 1
    """Worked examples shown as earlier chat turns (kept out of every split; file tasks take them
    from train rows that have a solution)."""
    min_digits: int = 0
    """Arithmetic: fewest digits per operand in train and held-out; 0 means task.digits (one level).
    Below task.digits, each digit count is a curriculum level d<k>-n<operands>."""
    system_prompt: str = ""
    """System message; empty keeps the chat template's default."""
    seed: int = 0
    """Seed for drawing and splitting problems (independent of train.seed)."""


@dataclass
class CurriculumConfig:
    mode: str = "none"
    """none (seeded epochs over all of train), schedule (only the level open at each step), or adaptive
    (open levels whose running pass rate is inside [band_low, band_high], half the prompts from the
    hardest open level)."""
    levels: list[str] = field(default_factory=list)
    """Difficulty labels from easiest to hardest; empty sorts the train split's labels naturally."""
    schedule: list[int] = field(default_factory=list)
    """schedule: the step at which each level after the first starts, e.g. [10, 20] for three levels."""
    band_low: float = 0.1
    """adaptive: a level whose pass rate is below this is too hard for now."""
    band_high: float = 0.9
    """adaptive: a level whose pass rate is above this is mastered; the next one opens."""
    smoothing: float = 0.5
    """adaptive: weight of the newest step in each level's running pass rate."""


@dataclass
class VllmConfig:
    gpu_memory_utilization: float = 0.3
    """Fraction of GPU memory vLLM may take (colocated with training)."""
    sleep: bool = True
    """Put vLLM to sleep (free its KV cache) while the trainer updates."""
    tis_cap: float = 0.0
    """Truncated importance sampling: weight tokens by min(pi_train / pi_vllm, cap); 0 disables."""
    server_url: str = ""
    """Server mode: address of `rlvr serve-rollouts`; empty runs vLLM in the training process."""


@dataclass
class RolloutConfig:
    prompts_per_step: int = 8
    """Prompts sampled per training step."""
    group_size: int = 8
    """Completions sampled per prompt (G)."""
    max_new_tokens: int = 24
    """Longest completion; longer ones are cut and counted as truncated."""
    temperature: float = 1.0
    """Sampling temperature (also applied to the training log-probabilities)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all."""
    engine: str = "builtin"
    """Rollout engine: builtin (shared-prefix KV cache), hf (plain generate), vllm (GPU, rlvr[vllm])."""
    vllm: VllmConfig = field(default_factory=VllmConfig)


@dataclass
class RewardsConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"correctness": 1.0, "format": 0.2})
    """Reward functions and their weights: a built-in name (correctness, format, length) or
    'module:function' with the TRL signature f(completions, **columns) -> list[float | None]."""
    overlong_buffer: int = 8
    """length reward: tokens before rollout.max_new_tokens where the penalty starts."""
    overlong_penalty: float = 1.0
    """length reward: the penalty at rollout.max_new_tokens (it falls linearly over the buffer)."""


@dataclass
class AlgoConfig:
    preset: str = "grpo"
    """Named set of the knobs below (grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp, ppo); explicit keys override it."""
    lr: float = 2e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 3
    """Linear learning-rate warm-up steps."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables."""
    adv_estimator: str = "group"
    """Advantages: group (GRPO), rloo (leave-one-out), reinforce_pp (batch-whitened returns), gae (PPO critic)."""
    adv_scale: str = "group"
    """group estimator: divide by the group std (group), the batch std (batch), or not at all (none)."""
    adv_eps: float = 1e-6
    """Added to the std when normalising advantages."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (ratio <= 1 + clip_high)."""
    dual_clip: Optional[float] = None
    """Dual-clip bound c for negative advantages (loss <= -A c); null disables."""
    ratio_level: str = "token"
    """Importance ratio per token, or per sequence (sequence: GSPO)."""
    aggregation: str = "seq-mean-token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean or seq-mean-token-sum-norm."""
    norm_length: int = 0
    """seq-mean-token-sum-norm divisor; 0 uses rollout.max_new_tokens."""
    iterations: int = 1
    """Policy updates per rollout batch (mu in the GRPO paper)."""
    beta: float = 0.0
    """KL coefficient to a frozen reference policy; 0 loads no reference."""
    kl_estimator: str = "k3"
    """KL estimator: k1, k2 or k3."""
    kl_in: str = "loss"
    """Where the KL goes: in the loss, or subtracted from the reward per token (reward)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0: off)."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and sample more prompts to fill the batch (DAPO)."""
    max_refill: int = 3
    """dynamic_sampling: at most this many extra rollout rounds per step."""
    soft_overlong: bool = False
    """Add the length reward (soft overlong punishment) with weight 1 if rewards.weights lacks it."""
    mask_truncated: bool = False
    """Leave completions cut at max_new_tokens out of the loss."""
    ref_sync_every: int = 0
    """Refresh the reference policy every this many steps (0: never)."""
    ref_mixup: float = 1.0
    """At a refresh, ref = mixup * policy + (1 - mixup) * ref."""
    value_lr: float = 1e-4
    """ppo: learning rate of the value head."""
    value_coef: float = 0.5
    """ppo: weight of the value loss."""
    value_clip: float = 0.2
    """ppo: value clip range around the rollout-time values."""
    gamma: float = 1.0
    """ppo: discount."""
    lam: float = 0.95
    """ppo: GAE lambda."""
    micro_batch_prompts: int = 4
    """Prompts (whole groups) per forward/backward pass; gradients accumulate over the step."""
    micro_batch_tokens: int = 0
    """If > 0, micro-batches are filled by this token budget (whole groups) instead of by prompt count."""


@dataclass
class TrainConfig:
    steps: int = 20
    """Training steps (one rollout batch each)."""
    seed: int = 0
    """Seed for sampling and prompt order."""
    out: str = "runs/demo"
    """Run directory."""
    samples_every: int = 5
    """Print a few samples every this many steps (0: never); all go to samples.jsonl."""
    eval_every: int = 0
    """Evaluate held-out accuracy every this many steps into evals.jsonl (0: only before and after)."""
    threads: int = 0
    """torch CPU threads; 0 keeps torch's default."""
    save_every: int = 10
    """Checkpoint every this many steps (0: only at the end and on SIGINT/SIGTERM)."""
    keep_checkpoints: int = 2
    """Checkpoints kept in RUN_DIR/checkpoints; older ones are deleted."""
    parallel: str = "ddp"
    """Under torchrun: ddp (DistributedDataParallel) or fsdp (FSDP2 fully_shard)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    mixed_precision: str = "no"
    """no, or bf16 (autocast the training forward to bfloat16)."""


@dataclass
class EvalConfig:
    max_new_tokens: int = 24
    """Longest greedy completion in evaluation."""
    batch_size: int = 50
    """Prompts per greedy generation batch."""
    before: bool = True
    """Evaluate before training."""
    after: bool = True
    """Evaluate after training."""


@dataclass
class LogConfig:
    trackers: list[str] = field(default_factory=list)
    """Optional trackers mirroring metrics.jsonl: tensorboard, wandb, trackio (each an extra)."""
    project: str = "rlvr"
    """Project name given to wandb / trackio."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)


# ---------------------------------------------------------------- building


def _hints(cls) -> dict[str, object]:
    return typing.get_type_hints(cls)


def valid_keys(cls=Config, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        t = _hints(cls)[f.name]
        if dataclasses.is_dataclass(t):
            keys += valid_keys(t, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"{where}: unknown config key '{key}'{hint}")


def _type_name(t) -> str:
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


def _coerce(value, t, key: str, where: str):
    """Check `value` against annotation `t`; ints are accepted for floats."""
    origin = typing.get_origin(t)
    bad = ConfigError(f"{where}: '{key}' must be {_type_name(t)}, got {value!r}")
    if origin is dict:
        kt, vt = typing.get_args(t)
        if not isinstance(value, dict):
            raise bad
        return {_coerce(k, kt, key, where): _coerce(v, vt, f"{key}.{k}", where) for k, v in value.items()}
    if origin is list:
        (it,) = typing.get_args(t)
        if not isinstance(value, list):
            raise bad
        return [_coerce(v, it, key, where) for v in value]
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(t):
            if option is type(None) and value is None:
                return None
            try:
                return _coerce(value, option, key, where)
            except ConfigError:
                pass
        raise bad
    if t is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if t is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            raise bad from None
    if t is bool and not isinstance(value, bool):
        raise bad
    if t in (int, float) and isinstance(value, bool):
        raise bad
    if not isinstance(value, t):
        raise bad
    return value


def _set(cfg, dotted: str, value, where: str) -> None:
    parts = dotted.split(".")
    obj = cfg
    for i, part in enumerate(parts):
        fields = {f.name for f in dataclasses.fields(obj)}
        if part not in fields:
            raise _unknown(dotted, where)
        t = _hints(type(obj))[part]
        rest = parts[i + 1:]
        if dataclasses.is_dataclass(t):
            if not rest:
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}: '{dotted}' is a section; give its keys")
                for k, v in value.items():
                    _set(cfg, f"{dotted}.{k}", v, where)
                return
            obj = getattr(obj, part)
            continue
        if typing.get_origin(t) is dict and rest:  # --rewards.weights.format=0.5
            current = dict(getattr(obj, part))
            current[".".join(rest)] = value
            value = current
        elif rest:
            raise _unknown(dotted, where)
        setattr(obj, part, _coerce(value, t, dotted, where))
        return


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: malformed YAML: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: malformed YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(arg: str) -> tuple[str, object]:
    """'--section.key=value' -> ('section.key', value parsed as YAML)."""
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"override '{arg}' must look like --section.key=value")
    key, raw = arg[2:].split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def build_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """Defaults, then the algo preset's knobs, then the YAML file, then the command line."""
    from rlvr.algo.presets import PRESETS

    cfg = Config()
    data = load_yaml(path) if path is not None else {}
    parsed = [parse_override(arg) for arg in overrides]
    preset = cfg.algo.preset
    if isinstance(data.get("algo"), dict) and "preset" in data["algo"]:
        preset = data["algo"]["preset"]
    preset = next((v for k, v in reversed(parsed) if k == "algo.preset"), preset)
    if preset not in PRESETS:
        raise ConfigError(f"unknown algo.preset '{preset}': one of {', '.join(PRESETS)}")
    for key, value in PRESETS[preset].items():
        _set(cfg, f"algo.{key}", value, f"preset {preset}")
    for key, value in data.items():
        _set(cfg, str(key), value, str(path))
    for key, value in parsed:
        _set(cfg, key, value, "command line")
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    checks = [
        (cfg.rollout.group_size >= 2, "rollout.group_size must be at least 2 (GRPO compares within a group)"),
        (cfg.rollout.prompts_per_step >= 1, "rollout.prompts_per_step must be at least 1"),
        (cfg.rollout.max_new_tokens >= 1, "rollout.max_new_tokens must be at least 1"),
        (cfg.rollout.temperature > 0, "rollout.temperature must be > 0 for training rollouts"),
        (0 < cfg.rollout.top_p <= 1, "rollout.top_p must be in (0, 1]"),
        (cfg.algo.iterations >= 1, "algo.iterations must be at least 1"),
        (cfg.algo.micro_batch_prompts >= 1, "algo.micro_batch_prompts must be at least 1"),
        (cfg.algo.aggregation in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
         f"algo.aggregation '{cfg.algo.aggregation}' is not token-mean, seq-mean-token-mean or "
         "seq-mean-token-sum-norm"),
        (cfg.model.dtype in ("float32", "bfloat16"), "model.dtype must be float32 or bfloat16"),
        (cfg.algo.adv_estimator in ("group", "rloo", "reinforce_pp", "gae"),
         f"algo.adv_estimator '{cfg.algo.adv_estimator}' is not group, rloo, reinforce_pp or gae"),
        (cfg.algo.adv_scale in ("group", "batch", "none"), "algo.adv_scale must be group, batch or none"),
        (cfg.algo.ratio_level in ("token", "sequence"), "algo.ratio_level must be token or sequence"),
        (cfg.algo.kl_in in ("loss", "reward"), "algo.kl_in must be loss or reward"),
        (cfg.algo.kl_estimator in ("k1", "k2", "k3"), "algo.kl_estimator must be k1, k2 or k3"),
        (0 < cfg.algo.ref_mixup <= 1, "algo.ref_mixup must be in (0, 1]"),
        (cfg.train.steps >= 0, "train.steps must be >= 0"),
        (cfg.curriculum.mode in ("none", "schedule", "adaptive"),
         "curriculum.mode must be none, schedule or adaptive"),
        (0 <= cfg.curriculum.band_low < cfg.curriculum.band_high <= 1,
         "curriculum.band_low and band_high must satisfy 0 <= band_low < band_high <= 1"),
        (cfg.rollout.engine in ("builtin", "hf", "vllm"), "rollout.engine must be builtin, hf or vllm"),
        (cfg.train.parallel in ("ddp", "fsdp"), "train.parallel must be ddp or fsdp"),
        (cfg.train.mixed_precision in ("no", "bf16"), "train.mixed_precision must be no or bf16"),
        (cfg.model.lora.r >= 0, "model.lora.r must be >= 0"),
        (not (cfg.model.lora.r > 0 and cfg.algo.ref_sync_every > 0),
         "algo.ref_sync_every needs a separate reference; with model.lora.r > 0 the reference is the base"),
        (bool(cfg.rewards.weights), "rewards.weights must name at least one reward function"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings of a dataclass, read from its source: the only help text."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def describe(cls=Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, doc) for every leaf key: what `rlvr train --help` prints."""
    rows = []
    defaults = cls()
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        t = _hints(cls)[f.name]
        if dataclasses.is_dataclass(t):
            rows += describe(t, f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", repr(getattr(defaults, f.name)), docs.get(f.name, "")))
    return rows
