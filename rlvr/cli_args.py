"""The command line's one rule, for every rlvr command: `--section.key=value` (a dotted key with '=') is a
config override, every other argument the command's own (`--flag value` or `--flag=value`). An argument
that fits neither is refused with the rlvr spelling where it is another trainer's habit (TRL's
`--num_generations=8` and `--config FILE`, verl's `actor_rollout_ref.rollout.n=8`); help lists every
config key with its default and doc."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlvr.errors import RlvrError


def build_config(*args, **kwargs):
    """rlvr.config.build_config, imported by the first command that reads a config: the config imports torch
    (its checks read the algorithm's tables), which `rlvr --help` and a mistyped command do without."""
    from rlvr.config import build_config as build

    return build(*args, **kwargs)


def is_override(arg: str) -> bool:
    """`--section.key=value`: a dotted key path before an '=' is a config override. Everything else
    (`--resume DIR`, `--resume=DIR`, `--n=5`) is the command's own: no command flag has a dot."""
    key, eq, _ = arg.partition("=")
    return arg.startswith("--") and eq == "=" and "." in key


# verl's (Hydra's) command line: key=value with no dashes, +key=value to add one
HYDRA = re.compile(r"^\+?[A-Za-z_][\w.]*=")
# other trainers' flag for the config file (TRL's --config, Hydra's --config-name and --config-path)
CONFIG_FLAGS = ("config", "config_file", "config-file", "config-name", "config_name", "config-path", "config_path")


def hint(arg: str, prog: str = "rlvr train") -> str:
    from rlvr.config import valid_keys
    from rlvr.config.names import FOREIGN, foreign_key, foreign_name

    if HYDRA.match(arg):  # actor_rollout_ref.rollout.n=8, as verl is run: rlvr's overrides start with --
        key, value = arg.lstrip("+").split("=", 1)
        if foreign_key(key):
            ours = FOREIGN[foreign_key(key)][0]
            return f"--{ours}=... ({foreign_name(key)})" if ours else ""
        return f"--{key}={value}"
    key = arg[2:].split("=", 1)[0]
    if key in CONFIG_FLAGS:
        return f"{prog} FILE.yaml (the config file is the first argument, not a flag)"
    if "." in key:
        return f"--{key}=VALUE"  # --algo.preset rloo: a config key needs its '='
    if key in FOREIGN:  # --num_generations=8, as TRL's command line spells it
        ours = FOREIGN[key][0]
        return f"--{ours}=... ({foreign_name(key)})" if ours else ""
    return " or ".join(f"--{k}=..." for k in valid_keys() if k.rsplit(".", 1)[-1] == key)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The command's own arguments (parsed) and the config overrides (as given)."""
    overrides = [a for a in argv if is_override(a)]
    args, extra = parser.parse_known_args([a for a in argv if not is_override(a)])
    config = getattr(args, "config", None)
    if config and HYDRA.match(config) and not Path(config).exists():  # `rlvr train rollout.n=8`: no file
        extra = [config, *extra]
    runs = getattr(args, "runs", None) or []  # rlvr compare's configs and run directories
    extra += [r for r in runs if HYDRA.match(r) and not Path(r).exists()]
    if extra:
        from rlvr.config.names import FOREIGN, foreign_key, foreign_name

        flags = [a for a in extra if a.startswith("--")]
        hydra = [a for a in extra if HYDRA.match(a)]
        hints = [h for h in (hint(a, parser.prog) for a in flags + hydra) if h]
        # another trainer's setting that rlvr has no key for: say so, and why
        keys = [a[2:].split("=", 1)[0] for a in flags] + [a.lstrip("+").split("=", 1)[0] for a in hydra]
        without = [foreign_name(k) for k in keys if foreign_key(k) and FOREIGN[foreign_key(k)][0] == ""]
        raise RlvrError(f"{parser.prog}: unrecognised arguments: {' '.join(extra)}"
                        + (f"; did you mean {', '.join(hints)}?" if hints else "")
                        + "".join(f"; {w}" for w in without)
                        + " (config keys: --section.key=value; --help lists them)")
    return args, overrides


class HelpParser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog is written when help is printed. The config keys' table reads the
    source of every config dataclass for its docs (about half of a two-step tiny-random run's time, paid
    by every `rlvr train` that only runs): a command that parses and runs never needs it."""

    def __init__(self, *args, epilog_of=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.epilog_of = epilog_of

    def format_help(self) -> str:
        if self.epilog_of is not None:
            self.epilog, self.epilog_of = self.epilog_of(), None
        return super().format_help()


def keys_epilog(title: str, keep=lambda key: True, beside: Path | None = None) -> str:
    """Every key with its default and doc; with `beside`, also that file's value where it differs."""
    from rlvr.config import describe

    other = {k: d for k, d, _ in describe(build_config(beside))} if beside is not None and beside.is_file() else {}
    rows = []
    for k, d, doc in describe():
        if keep(k):
            differs = f"   [{beside.name}: {other[k]}]" if k in other and other[k] != d else ""
            rows.append(f"  --{k}={d}{differs}\n      {doc}")
    return f"{title}:\n" + "\n".join(rows)
