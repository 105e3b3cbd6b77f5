"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file per checkpoint, RUN_DIR/checkpoints/step_NNNNNN.pt, written to a temporary name and renamed,
so a crash mid-write leaves the previous checkpoint whole. Model and optimizer states are full
(unsharded) tensors, so a checkpoint written by N processes resumes on M.
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import numpy as np
import torch

from rlvr.errors import RlvrError
from rlvr.report.sinks import atomic_write_text

CHECKPOINTS = "checkpoints"
_NAME = re.compile(r"^step_(\d{6,})\.pt$")


def rng_state(gen: torch.Generator) -> dict:
    """Every random generator a step draws from: Python, NumPy, torch's global one, the sampling one."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "sampling": gen.get_state()}


def set_rng_state(state: dict, gen: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    gen.set_state(state["sampling"])


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Finished checkpoints, oldest first."""
    d = Path(run_dir) / CHECKPOINTS
    found = [(int(m.group(1)), p) for p in d.glob("step_*.pt") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: str | Path, step: int, state: dict, keep: int) -> Path:
    """Write atomically, then delete all but the newest `keep` checkpoints. An OSError (disk full,
    permissions) propagates after the temporary file is removed; older checkpoints are untouched."""
    d = Path(run_dir) / CHECKPOINTS
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step_{step:06d}.pt"
    tmp = d / f".{path.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    for old in checkpoints(run_dir)[:-max(keep, 1)]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # our own file: RNG states are objects
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise RlvrError(f"checkpoint {path} cannot be read ({type(e).__name__}: {e}); "
                        "delete it to resume from the one before") from None


def truncate_jsonl(path: str | Path, last_step: int) -> None:
    """Keep the records whose step is at most `last_step`, dropping a torn last line: after a resume the
    file has no duplicated or missing steps."""
    path = Path(path)
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the crash
        if record.get("step", 0) <= last_step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))
