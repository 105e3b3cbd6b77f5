"""A run's checkpoint files as files: where they are (RUN_DIR/checkpoints/step_N.pt), which are there, whether
one is whole (its sha256 beside it) and reading one. Kept apart from rlvr/train/checkpoint.py (what a
checkpoint holds, writing and restoring it) so that loading a checkpoint as a model (rlvr/models/loading.py)
needs nothing of the trainer."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch

from rlvr.errors import RlvrError

CHECKPOINTS = "checkpoints"
_NAME = re.compile(r"^step_(\d{6,})\.pt$")


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Finished checkpoints, oldest first."""
    d = Path(run_dir) / CHECKPOINTS
    found = [(int(m.group(1)), p) for p in d.glob("step_*.pt") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def checksum_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """Where step `step`'s checkpoint is written."""
    return Path(run_dir) / CHECKPOINTS / f"step_{step:06d}.pt"


def damage(path: Path) -> str | None:
    """Why a checkpoint cannot be trusted (its bytes differ from the checksum written with it), or None.
    A checkpoint without a checksum file (written before they were) is not checked here."""
    sums = checksum_file(path)
    if not sums.is_file():
        return None
    want = sums.read_text(errors="replace").split(" ", 1)[0].strip()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    if h.hexdigest() != want:
        return f"its sha256 differs from the one written with it in {sums.name}"
    return None


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    why = damage(path)
    if why is not None:
        raise RlvrError(f"checkpoint {path} is damaged: {why}")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # our own file: RNG states are objects
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise RlvrError(f"checkpoint {path} cannot be read ({type(e).__name__}: {e})") from None
