"""Optional experiment trackers, off by default (`log.trackers`): TensorBoard, Weights & Biases, trackio.

metrics.jsonl and evals.jsonl are always written; a tracker mirrors each step's numeric metrics and each
evaluation's accuracies and flips (before training at step 0, every train.eval_every steps, at the end). Each needs its
own package (the extras `rlvr[tensorboard]`, `rlvr[wandb]`, `rlvr[trackio]`); a missing one is a clear
error at start-up, not a crash mid-run.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.text import clean_reason

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def _numeric(metrics: dict) -> dict[str, float]:
    """Numeric metrics under ASCII keys: a tracker's encoder may refuse any other (TensorBoard's
    protobuf raises on a lone surrogate, which would end the run)."""
    return {_key(k): float(v) for k, v in metrics.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def eval_metrics(row: dict) -> dict:
    """An evals.jsonl row as tracker metrics: each split's strict, format and format-free accuracy and its
    flips against step 0 (fixed, broken, kept, never), as eval/<split>_<name>."""
    return {f"eval/{k}": v for k, v in row.items() if k not in ("step", "train_seconds")}


def _key(k: str) -> str:
    return k if k.isascii() and k.isprintable() else "".join(
        c if c.isascii() and c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in k)


class TensorBoard:
    def __init__(self, out: Path, project: str, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.w = SummaryWriter(log_dir=str(out / "tensorboard"))

    def log(self, step: int, metrics: dict) -> None:
        for k, v in _numeric(metrics).items():
            self.w.add_scalar(k, v, step)
        self.w.flush()

    def close(self) -> None:
        self.w.close()


class _RunModule:
    """wandb and trackio share init(project, config) / log(dict, step) / finish()."""

    def __init__(self, module: str, out: Path, project: str, config: dict):
        self.m = importlib.import_module(module)
        kwargs = {"dir": str(out)} if module == "wandb" else {}
        self.m.init(project=project, config=config, **kwargs)

    def log(self, step: int, metrics: dict) -> None:
        self.m.log(_numeric(metrics), step=step)

    def close(self) -> None:
        self.m.finish()


def check_trackers(names: list[str]) -> None:
    """Every tracker named is known and installed: checked before the run directory is set up."""
    for name in names:
        if name not in PACKAGES:
            raise RlvrError(f"unknown tracker '{name}' in log.trackers: one of {', '.join(PACKAGES)}")
        if importlib.util.find_spec(PACKAGES[name]) is None:
            raise RlvrError(f"log.trackers has '{name}' but the package is not installed: "
                            f"pip install 'rlvr[{name}]'")


# what to do when a tracker cannot start, by tracker
FIXES = {"wandb": "set WANDB_API_KEY (or run `wandb login`), or log offline with WANDB_MODE=offline (`wandb sync` "
                  "uploads it later), or leave wandb out of log.trackers",
         "trackio": "see trackio's own message, or leave trackio out of log.trackers",
         "tensorboard": "make the run directory writable, or leave tensorboard out of log.trackers"}


def open_trackers(names: list[str], out: Path, project: str, config: dict) -> list:
    """Start every tracker named, before the run directory is written: one that cannot start (wandb with
    no API key raises at init) is one error naming the fix, and what the trackers made in `out` is removed,
    so the directory is left as it was and the same command runs once the fix is made."""
    check_trackers(names)
    held = set(os.listdir(out)) if out.is_dir() else None
    trackers = []
    for name in names:
        try:
            trackers.append(TensorBoard(out, project, config) if name == "tensorboard"
                            else _RunModule(name, out, project, config))
        except Exception as e:  # noqa: BLE001 - whatever a tracker's package raises at its start
            for t in trackers:
                with contextlib.suppress(Exception):
                    t.close()
            _remove_new(out, held)
            said = clean_reason(str(e).strip().splitlines()[0] if str(e).strip() else "")
            raise RlvrError(f"log.trackers: {name} could not start ({type(e).__name__}"
                            f"{': ' + said if said else ''}): {FIXES[name]}; nothing in {out} was changed") from None
    return trackers


def _remove_new(out: Path, held: set | None) -> None:
    """What appeared in `out` since `held` (its entries before the trackers started) removed."""
    if held is None or not out.is_dir():
        return
    for name in set(os.listdir(out)) - held:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
