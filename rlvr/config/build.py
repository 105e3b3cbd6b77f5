"""Building a config: defaults, then the algo preset, then a YAML file, then dotted command-line
overrides (`--rollout.group_size=16`), each over the one before. Unknown keys and wrongly typed values are
errors that name the key; validate.py checks ranges and choices.

Presets. The preset is the command line's `algo.preset`, else the file's, else grpo. A
config file's algo keys are written for the file's preset (its `algo.preset`, or grpo when it names
none): so when the command line picks a different preset, the file's values for the keys that preset
sets are dropped, with a note on stderr naming them, and the preset's values hold. The file's other
keys (iterations, entropy_coef, optimizer.lr, ...) still apply, and a key given on the command line always wins. So
`rlvr train configs/demo.yaml` keeps the demo's pinned beta 0, while `--algo.preset=rloo` on it gets
rloo's beta 0.05 and KL in the reward, as `build_config(None, ["--algo.preset=rloo"])` does.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path

import yaml

from rlvr.config.names import MOVED, RENAMED, foreign_name
from rlvr.config.sections import Config, ConfigError, LoraConfig
from rlvr.config.validate import validate
from rlvr.errors import decode_utf8


class _Loader(yaml.SafeLoader):
    """YAML with only true/false as booleans (YAML 1.2): PyYAML's 1.1 rules read `no`, `off`, `yes` and
    `on` as booleans, so `train.mixed_precision: no` or `--train.mixed_precision=no` would reach a string
    setting as False."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


def _yaml(text: str):
    return yaml.load(text, Loader=_Loader)


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
    foreign = foreign_name(key)
    if foreign:
        return ConfigError(f"{where}: unknown config key '{key}': {foreign}")
    close = difflib.get_close_matches(key, valid_keys() + list(MOVED), n=1, cutoff=0.5)
    hint = f"; did you mean '{MOVED.get(close[0], close[0])}'?" if close else ""
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
    if dotted in MOVED:
        print(f"note: {where}: '{dotted}' is now '{MOVED[dotted]}'; the old key still works", file=sys.stderr)
        dotted = MOVED[dotted]
    if dotted in RENAMED:
        new, old_default = RENAMED[dotted]
        if value == old_default:
            return
        raise ConfigError(f"{where}: '{dotted}' is now '{new}' (it applies to every engine); "
                          f"set {new}={value!r} instead")
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


# the repository's root, whose configs/ holds the shipped configs (an editable install, as make sets up)
REPOSITORY = Path(__file__).resolve().parents[2]


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():  # `rlvr train configs/demo.yaml` run from another directory: say where that one is
        shipped = REPOSITORY / path if not path.is_absolute() else None
        hint = f"; the shipped config of that name is {shipped}" if shipped is not None and shipped.is_file() else ""
        raise ConfigError(f"config file not found: {path}{hint}")
    try:
        data = _yaml(decode_utf8(path.read_bytes(), path))
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


def key_lines(path: str | Path) -> dict[str, int]:
    """The line (1-based) of each key of a config file, as `_flat` names them (`section.key`, and the
    section itself), so an error about a key can say where it is written."""
    node = yaml.compose(decode_utf8(Path(path).read_bytes(), Path(path)), Loader=_Loader)
    lines: dict[str, int] = {}

    def walk(mapping: yaml.MappingNode, prefix: str) -> None:  # every depth: another trainer's nesting too
        for k, v in mapping.value:
            lines[prefix + str(k.value)] = k.start_mark.line + 1
            if isinstance(v, yaml.MappingNode):
                walk(v, f"{prefix}{k.value}.")

    for k, v in node.value if isinstance(node, yaml.MappingNode) else []:
        lines[str(k.value)] = k.start_mark.line + 1
        if isinstance(v, yaml.MappingNode) and "." not in str(k.value):
            walk(v, f"{k.value}.")
    return lines


def parse_override(arg: str) -> tuple[str, object]:
    """'--section.key=value' -> ('section.key', value parsed as YAML)."""
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"override '{arg}' must look like --section.key=value")
    key, raw = arg[2:].split("=", 1)
    try:
        value = _yaml(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _flat(data: dict) -> dict:
    """A file's keys as `section.key` (a section's keys one level down), in the file's order; values, and
    anything that is not a section, are left for `_set` to check. Under a section rlvr does not have, every
    leaf is a key of its own: another trainer's nesting (verl's `actor_rollout_ref.rollout.n`) is then
    refused leaf by leaf, each with the rlvr key it means (FOREIGN), not as one block."""
    sections = {f.name for f in dataclasses.fields(Config)}
    out = {}

    def leaves(prefix: str, v) -> None:
        if isinstance(v, dict) and v:
            for sub, value in v.items():
                leaves(f"{prefix}.{sub}", value)
        else:
            out[prefix] = v

    for k, v in data.items():
        if isinstance(v, dict) and "." not in str(k):
            for sub, value in v.items():
                if str(k) in sections:
                    out[f"{k}.{sub}"] = value
                else:
                    leaves(f"{k}.{sub}", value)
        else:
            out[str(k)] = v
    return out


def _preset_key(key: str) -> str:
    """A preset's knob as a config key: a bare name is an algo key."""
    return key if "." in key else f"algo.{key}"


def _preset_replaces(data: dict, preset: str, where: str) -> dict:
    """The file's flattened data, less the keys that `preset` sets when the file was written for another
    preset (see the module docstring); says on stderr which values it dropped."""
    from rlvr.algo.presets import presets

    written_for = data.get("algo.preset", Config().algo.preset)
    sets = {_preset_key(k) for k in presets()[preset]}
    dropped = sorted(k for k in data if MOVED.get(k, k) in sets) if preset != written_for else []
    if dropped:
        values = ", ".join(f"{k}={data[k]!r}" for k in dropped)
        print(f"note: algo.preset={preset} from the command line replaces {values} set by {where} "
              f"(written for preset {written_for}); give them on the command line to keep them", file=sys.stderr)
    return {k: v for k, v in data.items() if k not in dropped}


def build_config(path: str | Path | None = None, overrides: list[str] = (), command: str = "train",
                 source: str = "command line") -> Config:
    """Defaults, then the algo preset's knobs, then the YAML file, then the command line; a preset given
    on the command line also replaces the file's values for the keys it sets (module docstring). `command`
    names the run directory when nothing else does (default_out); `source` is where the overrides were
    written, as an error about one names it (rlvr.fit's keywords are no command line)."""
    from rlvr.algo.presets import presets

    PRESETS = presets()
    cfg = Config()
    data = _flat(load_yaml(path)) if path is not None else {}
    parsed = [parse_override(arg) for arg in overrides]
    preset = next((v for k, v in reversed(parsed) if k == "algo.preset"), None)
    if preset is None:
        preset = data.get("algo.preset", cfg.algo.preset)
    if preset not in PRESETS:
        raise ConfigError(f"unknown algo.preset '{preset}': one of {', '.join(PRESETS)}")
    data = _preset_replaces(data, preset, str(path))
    for key, value in PRESETS[preset].items():
        _set(cfg, _preset_key(key), value, f"preset {preset}")
    lines, problems = key_lines(path) if path is not None else {}, []
    for key, value in data.items():
        line = lines.get(str(key))
        try:
            _set(cfg, str(key), value, f"{path}, line {line}" if line else str(path))
        except ConfigError as e:  # every bad key of the file at once: a config brought from another trainer has several
            problems.append(str(e))
    if len(problems) > 1:
        raise ConfigError(f"{len(problems)} keys of {path} cannot be used:\n  " + "\n  ".join(problems))
    if problems:
        raise ConfigError(problems[0])
    for key, value in parsed:
        _set(cfg, key, value, source)
    if not cfg.train.out:
        cfg.train.out = default_out(path, command)
    validate(cfg)
    _lora_without_rank(cfg)
    return cfg


def _lora_without_rank(cfg: Config) -> None:
    """A note when LoRA's other keys differ from their defaults while model.lora.r is 0: the run fine-tunes
    every weight, which is seldom what a config that shapes adapters meant (TRL's lora_* keys do nothing
    without use_peft either, so this is easy to miss). A note, not an error: --model.lora.r=0 on a LoRA
    config is how a full fine-tuning comparison is run."""
    lora, default = cfg.model.lora, LoraConfig()
    named = [f"model.lora.{k}" for k in ("alpha", "dropout", "target_modules") if getattr(lora, k) != getattr(default, k)]
    if lora.r == 0 and named:
        print(f"note: {', '.join(named)} set, but model.lora.r is 0: every weight is trained, no LoRA adapters; "
              f"set model.lora.r > 0 for LoRA", file=sys.stderr)


def default_out(path: str | Path | None, command: str = "train") -> str:
    """Where a run goes when its config names no train.out: named after the config file, so runs of
    different configs never share a directory; `rlvr sft` of a config adds -sft (runs/sft without a file),
    so that `rlvr sft mine.yaml` and then `rlvr train mine.yaml` from its final/ do not share one either."""
    if command == "sft":
        return f"runs/{Path(path).stem}-sft" if path is not None else "runs/sft"
    return f"runs/{Path(path).stem}" if path is not None else "runs/run"


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings of a dataclass and of the dataclasses it inherits fields from, read from their
    source: the only help text. A class's `HELP_LISTS` (name -> function) fills each `{name}` of its
    docstrings with what the function returns when the help is read (a list kept in a registry)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # object, or a class made by type() (rlvr.algo.objectives.AllKnobs)
            continue
        body = tree.body[0].body
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)):
                text = str(nxt.value.value)
                for name, fill in vars(klass).get("HELP_LISTS", {}).items():
                    text = text.replace("{" + name + "}", fill())
                docs[node.target.id] = " ".join(text.split())
    return docs


def describe(cfg=None, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, value, doc) for every leaf key of `cfg`: what `rlvr train --help` prints. The default is
    build_config(None): the dataclass defaults with the default preset (grpo) applied."""
    if cfg is None:
        cfg = build_config(None)
        cfg.train.out = ""   # filled from each config file's name (default_out): the help gives the rule
    docs = field_docs(type(cfg))
    rows = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            rows += describe(value, f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", repr(value), docs.get(f.name, "")))
    return rows
