"""Building a config: defaults, then the algo preset, then a YAML file, then dotted command-line
overrides (`--rollout.group_size=16`). Unknown keys and wrongly typed values are errors that name the key.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
import types
import typing
from pathlib import Path

import yaml

from rlvr.config.sections import Config, ConfigError


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
