"""A run's config with its relative paths made absolute, so that the config.yaml it saves resumes from
any working directory and nothing the run writes follows a reward's os.chdir: the run directory, task
files, a local model directory, and the .py files of reward functions and environments. Names that are
not paths here (built-in tasks and models, Hub names, importable modules) are left as they are. And how a
config differs from the config.yaml a run saved (`changed_keys`: a resume's notes and refusals)."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from rlvr.config.sections import Config


def _absolute(value: str) -> str:
    """`value` as an absolute path when it names something that exists from here; else unchanged."""
    if not value or Path(value).is_absolute() or not Path(value).expanduser().exists():
        return value
    return str(Path(value).expanduser().resolve())


def absolute_spec(spec: str) -> str:
    """'[verl:]path/to/file.py:name' with the file's path made absolute; other specs unchanged."""
    module, sep, attr = spec.rpartition(":")
    head, colon, path = module.rpartition(":")
    if not sep or not path.endswith(".py"):
        return spec
    return f"{head}{colon}{_absolute(path)}{sep}{attr}"


def anchored(cfg: Config) -> Config:
    """A copy of `cfg` whose paths do not depend on the working directory (module docstring)."""
    out = copy.deepcopy(cfg)
    t = out.task
    t.name, t.heldout_file, t.ood_file, t.ood_name = map(_absolute, (t.name, t.heldout_file, t.ood_file, t.ood_name))
    out.model.name = _absolute(out.model.name)
    out.rewards.weights = {absolute_spec(k): v for k, v in out.rewards.weights.items()}
    out.env.name = absolute_spec(out.env.name)
    out.env.tools = [absolute_spec(tool) for tool in out.env.tools]
    if out.train.out:  # the run's own directory, fixed at the start: a reward's os.chdir moves nothing
        out.train.out = str(Path(out.train.out).expanduser().absolute())
    return out


def changed_keys(saved: Path, now: dict, ignore: tuple[str, ...] = ("train.steps", "train.out"),
                 limit: int | None = 8) -> list[str]:
    """'key=new (was old)' for each config key where `now` (a config as plain values: to_dict's) differs from
    the config.yaml a run saved, the keys in `ignore` aside (by default those a resume changes freely); the
    first `limit` of them (None: all)."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) and k not in ("params", "weights", "columns",
                                                                                        "ood_params") else {f"{prefix}{k}": v})
        return out

    try:
        old = flat(yaml.safe_load(saved.read_text()) or {})
    except (OSError, yaml.YAMLError):
        return []
    new = flat(now)
    return [f"{k}={new.get(k)} (was {old.get(k)})" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k) and k not in ignore][:limit]
