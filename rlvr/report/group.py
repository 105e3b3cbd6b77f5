"""A seed group's folder as files (rlvr train --seeds writes it, rlvr compare reads it):

    OUT/group.json    {"kind": "rlvr seed group", "config", "overrides", "cwd", "seeds", "runs", "keep_weights"}
    OUT/seed-N/       each seed's run directory
"""
from __future__ import annotations

import json
from pathlib import Path

from rlvr.errors import RlvrError

GROUP = "group.json"
KIND = "rlvr seed group"


def seed_dir(out: Path, seed: int) -> Path:
    return Path(out) / f"seed-{seed}"


def is_group(path: Path) -> bool:
    return (Path(path) / GROUP).is_file()


def read_group(path: Path) -> dict:
    """group.json of a group folder, checked: a clear error naming the file when it is not one."""
    file = Path(path) / GROUP
    try:
        group = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise RlvrError(f"{file}: not a seed group's file ({e})") from None
    if (not isinstance(group, dict) or group.get("kind") != KIND or not isinstance(group.get("seeds"), list)
            or not all(isinstance(s, int) for s in group["seeds"])):
        raise RlvrError(f"{file}: not a seed group's file (rlvr train --seeds writes one, with its list of seeds)")
    return group
