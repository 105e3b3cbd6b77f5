"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file per checkpoint, RUN_DIR/checkpoints/step_NNNNNN.pt, written to a temporary name and renamed,
so a crash mid-write leaves the previous checkpoint whole. Model and optimizer states are full
(unsharded) tensors, so a checkpoint written by N processes resumes on M.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import torch

from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)

from rlvr.errors import RlvrError
from rlvr.report.console import say
from rlvr.report.sinks import atomic_write_text
from rlvr.models import load_model
from rlvr.report.sinks import atomic_save_model
from rlvr.train.distributed import full_state_dict, gather_objects, is_fsdp, load_full_state_dict
from rlvr.train.state import Progress, Run

CHECKPOINTS = "checkpoints"
_NAME = re.compile(r"^step_(\d{6,})\.pt$")
# What a run writes into its directory besides config.yaml: a fresh run into a directory it may replace
# (train.overwrite, or a resume that found no checkpoint) removes them, so no record of an earlier run
# in the same directory is read as this one's.
RUN_RECORDS = ("eval_before.jsonl", "eval_after.jsonl", "metrics.jsonl", "samples.jsonl", "evals.jsonl",
               "health.jsonl", "summary.json", "report.html")
RUN_DIRS = (CHECKPOINTS, "final")


# How each entry point spells the three ways on from a run directory that is taken: resume it (None: the
# entry point cannot), another directory, or replacing it
WAYS = {"rlvr train": ("`rlvr train --resume {out}`", "--train.out=DIR", "--train.overwrite=true"),
        "rlvr sft": (None, "--train.out=DIR", "--train.overwrite=true"),
        "rlvr.fit": ("rlvr.fit(resume='{out}', rewards=...)", "train__out=DIR", "train__overwrite=True")}


def check_run_dir(out: str | Path, overwrite: bool, command: str = "rlvr train") -> None:
    """Refuse to start a fresh run in a directory that holds anything, unless train.overwrite: read
    only, so it can run first, before the config's data and model are loaded. `command`: a key of WAYS."""
    out = Path(out)
    resume, elsewhere, replace = WAYS[command]
    if out.exists() and not out.is_dir():
        raise RlvrError(f"train.out={out} is a file, not a directory; choose another with {elsewhere}")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not held or overwrite:
        return
    shown = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
    options = [f"continue it with {resume.format(out=out)}"] if resume and (out / "config.yaml").is_file() else []
    options += [f"choose another directory with {elsewhere}", f"replace it with {replace}"]
    raise RlvrError(f"{out} already holds files ({shown}) and nothing in it was changed: "
                    f"{', '.join(options[:-1])} or {options[-1]}")


def prepare_run_dir(out: Path, config_yaml: str, fresh: bool) -> None:
    """Create the run directory and write its config.yaml; a fresh run first removes an earlier run's
    records, checkpoints and final model (a resumed run keeps them). Called by rank 0 only, once the
    config, data and model have loaded: a start that fails before it leaves the directory as it was."""
    out.mkdir(parents=True, exist_ok=True)
    if fresh:
        for name in RUN_RECORDS:
            (out / name).unlink(missing_ok=True)
        for name in RUN_DIRS:
            shutil.rmtree(out / name, ignore_errors=True)
    atomic_write_text(out / "config.yaml", config_yaml)


def rng_state() -> dict:
    """The global random generators: Python, NumPy, torch. Rollouts draw from per-group seeds
    (rlvr.rollout.sampling.group_seed), which need no state."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


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
    permissions; torch's RuntimeError for a short write becomes one) propagates after the temporary file
    is removed; older checkpoints are untouched."""
    d = Path(run_dir) / CHECKPOINTS
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step_{step:06d}.pt"
    tmp = d / f".{path.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            try:
                torch.save(state, f)
            except RuntimeError as e:  # torch's zip writer reports a short write (disk full) this way
                raise OSError(f"writing {tmp} failed: {e}") from e
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


def _optimizer_state(run: Run) -> dict:
    """Keyed by parameter name (torch.distributed.checkpoint's full state), so it loads into a plain,
    DDP or FSDP2 policy alike; a PPO critic (single process only) keeps the optimizer's own form."""
    if run.critic is not None:
        return {"format": "torch", "state": run.optimizer.state_dict()}
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {"format": "full", "state": get_optimizer_state_dict(run.policy, run.optimizer, options=options)}


def checkpoint_state(run: Run, p: Progress, train_seconds: float, pending: dict | None = None) -> dict:
    """The whole state, collected on every rank (FSDP gathers shards); only rank 0's is complete.
    `pending`: the next step's batch, collected already (rollout.overlap one_step_off)."""
    d = run.dist
    return {"step": p.step, "world": d.world, "policy": full_state_dict(run.policy, d),
            "critic": run.critic.state_dict() if run.critic is not None else None,
            "ref": run.ref.model.state_dict() if run.ref is not None and not run.ref.adapters_off else None,
            "optimizer": _optimizer_state(run), "scheduler": run.scheduler.state_dict(),
            "sampler": run.sampler.state_dict(), "rng": gather_objects(rng_state(), d),
            "progress": {**dataclasses.asdict(p), "fired": sorted(p.fired), "train_seconds": train_seconds},
            "pending": pending}


def restore(run: Run, state: dict) -> Progress:
    """Load a checkpoint written by any number of processes. With the same world size every rank gets
    its own global generators back (Python, NumPy, torch); with another, all take rank 0's. Rollouts
    need no generator state: they draw from per-group seeds (rlvr.rollout.sampling.group_seed)."""
    d = run.dist
    load_full_state_dict(run.policy, state["policy"], d)
    if run.critic is not None:
        run.critic.load_state_dict(state["critic"])
    if run.ref is not None and state["ref"] is not None:
        run.ref.model.load_state_dict(state["ref"])
    opt = state["optimizer"]
    if opt["format"] == "full":
        set_optimizer_state_dict(run.policy, run.optimizer, optim_state_dict=opt["state"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        run.optimizer.load_state_dict(opt["state"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.sampler.load_state_dict(state["sampler"])
    rngs = state["rng"]  # one per rank that wrote it; on another number of ranks, rank 0's
    set_rng_state(rngs[d.rank] if len(rngs) == d.world else rngs[0])
    p = Progress(**{**state["progress"], "fired": set(state["progress"]["fired"])})
    if d.is_main:
        for name in ("metrics.jsonl", "samples.jsonl", "evals.jsonl", "health.jsonl"):
            truncate_jsonl(run.out / name, p.step)
    return p


def try_checkpoint(run: Run, p: Progress, train_seconds: float, pending: dict | None = None) -> None:
    """Every rank takes part (FSDP gathers); rank 0 writes. A failed write (disk full, permissions) is
    reported and training goes on from memory."""
    state = checkpoint_state(run, p, train_seconds, pending)
    if not run.dist.is_main:
        return
    try:
        save_checkpoint(run.out, p.step, state, run.cfg.train.keep_checkpoints)
    except OSError as e:
        last = latest_checkpoint(run.out)
        say(f"warning: checkpoint at step {p.step} could not be written ({e}); "
            + (f"{last} is still whole and usable" if last else "there is no earlier checkpoint"))


def save_final(run: Run) -> None:
    """RUN_DIR/final as a plain Hugging Face model (LoRA: merged, plus the adapter)."""
    if not is_fsdp(run.policy):
        if run.dist.is_main:
            atomic_save_model(run.policy, run.tok, run.out / "final")
        return
    state = full_state_dict(run.policy, run.dist)  # every rank gathers; rank 0 gets the weights
    if run.dist.is_main:
        plain, _ = load_model(run.cfg.model.name, run.cfg.model.dtype)
        plain.load_state_dict(state)
        atomic_save_model(plain, run.tok, run.out / "final")


class StopOnSignal:
    """SIGINT / SIGTERM ask the loop to stop after the current step; a second SIGINT abandons it."""

    def __init__(self):
        self.signal: str | None = None
        self._old = {}

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        say(f"{self.signal}: finishing step, writing a checkpoint, then exiting (SIGINT again to abandon)")

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
