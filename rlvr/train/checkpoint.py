"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file per checkpoint, RUN_DIR/checkpoints/step_NNNNNN.pt, written to a temporary name and renamed,
so a crash mid-write leaves the previous checkpoint whole; beside it step_NNNNNN.pt.sha256 (the format
`sha256sum -c` reads), written before the rename, so a checkpoint damaged later on disk is known at load
and the newest whole one is used instead. Model and optimizer states are full (unsharded) tensors, so a
checkpoint written by N processes resumes on M.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import torch
import yaml

from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)

from rlvr.config import Config, to_dict
from rlvr.errors import RlvrError, write_error
from rlvr.report.console import say
from rlvr.io import atomic_save_model, atomic_write_text
from rlvr.report.sinks import jsonl_records
from rlvr.models import base_model_path, load_model
from rlvr.train.rundir import LOCK, remove_leftovers
from rlvr.train.distributed import full_state_dict, gather_objects, is_fsdp, load_full_state_dict
from rlvr.train.settings import weight_settings
from rlvr.train.state import Progress, Run
from rlvr.checkpoint_files import (CHECKPOINTS, checkpoint_path, checkpoints, checksum_file, latest_checkpoint,
                                   load_checkpoint)

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
    held = sorted(p.name for p in out.iterdir() if p.name != LOCK) if out.is_dir() else []
    if not held or overwrite:
        return
    shown = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
    options = [f"continue it with {resume.format(out=out)}"] if resume and (out / "config.yaml").is_file() else []
    options += [f"choose another directory with {elsewhere}", f"replace it with {replace}"]
    raise RlvrError(f"{out} already holds files ({shown}) and nothing in it was changed: "
                    f"{', '.join(options[:-1])} or {options[-1]}")


def check_restart(out: str | Path) -> None:
    """A resume that finds no checkpoint starts the run again from step 0, replacing the directory's records:
    refused where the directory holds more than a start that stopped short of its first checkpoint (a
    run's summary.json or final/ model: a finished run whose checkpoints were deleted to free space, an
    rlvr sft run), which starting again would delete. Read only, before anything loads."""
    out = Path(out)
    held = [name for name in ("summary.json", "final") if (out / name).exists()]
    if not held:
        return
    none = ""
    try:
        if (yaml.safe_load((out / "config.yaml").read_text()) or {}).get("train", {}).get("save_every") == 0:
            none = " (it ran with train.save_every=0, which writes no checkpoint)"
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    further = f"train its model further in a new run (--model.name={out / 'final'} --train.out=NEW_DIR), or " \
        if "final" in held else ""
    raise RlvrError(f"a resume of {out} found no checkpoint in {out / CHECKPOINTS} to continue from{none}, and the "
                    f"directory holds a run's results ({', '.join(held)}), which starting again from step 0 would "
                    f"replace; nothing in it was changed: {further}replace the run with rlvr train "
                    f"{out / 'config.yaml'} --train.overwrite=true")


def prepare_run_dir(out: Path, config_yaml: str, fresh: bool) -> None:
    """Create the run directory and write its config.yaml; a fresh run first removes an earlier run's
    records, checkpoints and final model (a resumed run keeps them); both remove what writes cut short
    by a kill left. Called by rank 0 only, once the config, data and model (and a resumed run's
    checkpoint) have loaded: a start that fails before it leaves the directory as it was."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(out, e) from None
    if fresh:
        for name in RUN_RECORDS:
            (out / name).unlink(missing_ok=True)
        for name in RUN_DIRS:
            shutil.rmtree(out / name, ignore_errors=True)
    remove_leftovers(out, ("config.yaml", *RUN_RECORDS, *RUN_DIRS))
    atomic_write_text(out / "config.yaml", config_yaml)


def rng_state() -> dict:
    """The global random generators: Python, NumPy, torch. Rollouts draw from per-group seeds
    (rlvr.rollout.sampling.group_seed), which need no state."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


class _Hashing:
    """A file that hashes what is written through it: the checksum costs no second read of the file."""

    def __init__(self, f):
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(run_dir: str | Path, step: int, state: dict, keep: int) -> Path:
    """Write atomically (the checksum file first, then the checkpoint renamed into place), then delete
    all but the newest `keep` checkpoints. An OSError (disk full, permissions; torch's RuntimeError for a
    short write becomes one) propagates after the temporary file is removed; older checkpoints are
    untouched."""
    path = checkpoint_path(run_dir, step)
    d = path.parent
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{path.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            hashing = _Hashing(f)
            try:
                torch.save(state, hashing)
            except RuntimeError as e:  # torch's zip writer reports a short write (disk full) this way
                raise OSError(f"writing {tmp} failed: {e}") from e
            f.flush()
            os.fsync(f.fileno())
        atomic_write_text(checksum_file(path), f"{hashing.sha.hexdigest()}  {path.name}\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    for old in checkpoints(run_dir)[:-max(keep, 1)]:
        old.unlink(missing_ok=True)
        checksum_file(old).unlink(missing_ok=True)
    return path


def load_newest(run_dir: str | Path) -> tuple[Path, dict, list[tuple[Path, str]]] | None:
    """The newest checkpoint that is whole: (path, state, the newer ones that were not, with why); None
    when there is no checkpoint. Reads only: the damaged ones are set aside by `set_aside`, once the
    resume has loaded. No whole checkpoint at all is an error naming each."""
    found = checkpoints(run_dir)
    if not found:
        return None
    bad = []
    for path in reversed(found):
        try:
            state = load_checkpoint(path)
        except RlvrError as e:
            bad.append((path, str(e).split(f"checkpoint {path} ", 1)[-1]))
            continue
        for p, why in bad:
            say(f"note: checkpoint {p} {why}; resuming from {path.name}, the newest whole one")
        return path, state, bad
    raise RlvrError(f"no checkpoint in {Path(run_dir) / CHECKPOINTS} can be loaded: "
                    + "; ".join(f"{p.name} {why}" for p, why in bad))


def set_aside(damaged: list[tuple[Path, str]]) -> None:
    """Rename damaged checkpoints to step_N.pt.damaged (with their checksums): kept for a look, no longer
    a checkpoint, so neither a later resume nor the pruning of old checkpoints counts them."""
    for path, _ in damaged:
        os.replace(path, path.with_name(path.name + ".damaged"))
        checksum_file(path).unlink(missing_ok=True)


def truncate_jsonl(path: str | Path, last_step: int | None = None, keep: int | None = None) -> None:
    """Keep the records whose step is at most `last_step` (or the first `keep` records), dropping lines
    a crash cut short (not JSON, or not UTF-8): after a resume the file has no duplicated or missing
    steps."""
    path = Path(path)
    if not path.exists():
        return
    kept = [line for _, line, record in jsonl_records(path) if record is not None
            and (last_step is None or record.get("step", 0) <= last_step)]
    atomic_write_text(path, "".join(line + "\n" for line in kept[:keep]))


def _optimizer_state(run: Run) -> dict:
    """Keyed by parameter name (torch.distributed.checkpoint's full state), so it loads into a plain,
    DDP or FSDP2 policy alike; a PPO critic (single process only) keeps the optimizer's own form."""
    m = run.models
    if m.critic is not None:
        return {"format": "torch", "state": m.optimizer.state_dict()}
    if not m.optimizer.state:  # never stepped (stopped during the first evaluation): get_optimizer_state_dict
        return {"format": "none"}  # would step it once with zero moments to make a state, and save that
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {"format": "full", "state": get_optimizer_state_dict(m.policy, m.optimizer, options=options)}


def checkpoint_state(run: Run, p: Progress, train_seconds: float, pending: dict | None = None) -> dict:
    """The whole state, collected on every rank (FSDP gathers shards); only rank 0's is complete.
    `pending`: the next step's batch, collected already (rollout.overlap one_step_off)."""
    d, m = run.dist, run.models
    return {"step": p.step, "world": d.world, "policy": full_state_dict(m.policy, d),
            "critic": m.critic.state_dict() if m.critic is not None else None,
            "ref": m.ref.model.state_dict() if m.ref is not None and not m.ref.adapters_off else None,
            "optimizer": _optimizer_state(run), "scheduler": m.scheduler.state_dict(),
            "sampler": run.data.sampler.state_dict(), "rng": gather_objects(rng_state(), d),
            "progress": {**dataclasses.asdict(p), "fired": sorted(p.fired), "train_seconds": train_seconds},
            "pending": pending, "weights": dict(run.settings.checkpoint.weights)}


def restore(run: Run, state: dict) -> Progress:
    """Load a checkpoint written by any number of processes. With the same world size every rank gets
    its own global generators back (Python, NumPy, torch); with another, all take rank 0's. Rollouts
    need no generator state: they draw from per-group seeds (rlvr.rollout.sampling.group_seed)."""
    d, m = run.dist, run.models
    load_full_state_dict(m.policy, state["policy"], d)
    if m.critic is not None:
        m.critic.load_state_dict(state["critic"])
    if m.ref is not None and state["ref"] is not None:
        m.ref.model.load_state_dict(state["ref"])
    opt = state["optimizer"]
    if opt["format"] == "none":
        pass  # the fresh optimizer of this start is the one the checkpoint had
    elif opt["format"] == "full":
        set_optimizer_state_dict(m.policy, m.optimizer, optim_state_dict=opt["state"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        m.optimizer.load_state_dict(opt["state"])
    m.scheduler.load_state_dict(state["scheduler"])
    run.data.sampler.load_state_dict(state["sampler"])
    rngs = state["rng"]  # one per rank that wrote it; on another number of ranks, rank 0's
    set_rng_state(rngs[d.rank] if len(rngs) == d.world else rngs[0])
    return Progress(**{**state["progress"], "fired": set(state["progress"]["fired"])})


def restore_checkpoint(run: Run, state: dict, path: Path, cfg: Config) -> Progress:
    """`restore`, with a checkpoint that does not fit this start's config (an override that changes what
    its weights are, the model, the optimizer's groups or the task's problems) said in one line naming
    the keys that differ from the run's config.yaml, instead of the error of whichever state failed to
    load, or (weights that would load into another model) of none. Any other key this start changes is
    said in a note."""
    check_weight_settings(state, path, run.settings.checkpoint.weights, run.out / "config.yaml")
    problems = state["progress"]["summary"].get("data", {}).get("problems", {}).get("train")
    why = None
    if problems is not None and problems != len(run.data.splits.train):
        why = f"it trained on {problems} train problems, this config makes {len(run.data.splits.train)}"
    else:
        try:
            p = restore(run, state)
        except RlvrError:
            raise
        except Exception as e:  # noqa: BLE001 - whichever state does not fit, the cause is the config
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else 'no message'}"
        else:
            changed = changed_keys(run.out / "config.yaml", cfg, ignore=("train.out",))
            if changed:  # a learning rate, more steps, a dropout: the run goes on under them from here
                say(f"note: resuming with settings changed from the run's config.yaml: {', '.join(changed)}")
            return p
    changed = changed_keys(run.out / "config.yaml", cfg)
    raise RlvrError(f"checkpoint {path} does not fit this config ({why})"
                    + (f"; it differs from the run's config.yaml in {', '.join(changed)}" if changed else "")
                    + "; nothing in the run directory was changed: resume without those overrides")


def check_weight_settings(state: dict, path: Path, now: dict, saved: Path) -> None:
    """Refuse a resume whose WEIGHT_KEYS (rlvr/train/settings.py) differ from those the checkpoint's weights
    were trained under: recorded in the checkpoint, else (one written before they were) the run's
    config.yaml. Such weights would load, or fail to, into another model than the one they are."""
    was = state.get("weights")
    if was is None:
        try:
            was = weight_settings(yaml.safe_load(saved.read_text()) or {})
        except (OSError, yaml.YAMLError):
            return
    differ = [k for k in now if k in was and was[k] != now[k]]
    if differ:
        raise RlvrError(f"checkpoint {path} holds weights trained with "
                        + ", ".join(f"{k}={was[k]}" for k in differ) + "; this start sets "
                        + ", ".join(f"{k}={now[k]}" for k in differ) + ": under another value the same weights "
                        "are another model, so a resume keeps them; nothing in the run directory was changed: "
                        f"resume without --{differ[0]}, or start a new run from the checkpoint's model with it "
                        f"(--model.name={path} --train.out=NEW_DIR)")


def changed_keys(saved: Path, cfg: Config, ignore: tuple[str, ...] = ("train.steps", "train.out")) -> list[str]:
    """'key=new (was old)' for each config key where `cfg` differs from the config.yaml a run saved,
    the keys in `ignore` aside (by default those a resume changes freely)."""
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
    new = flat(to_dict(cfg))
    return [f"{k}={new.get(k)} (was {old.get(k)})" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k) and k not in ignore][:8]


def finished_run(cfg: Config) -> dict | None:
    """The summary of a run that finished under cfg as it is, so a resume has nothing to do: its
    summary.json (written last, once the final model is saved) says it ended at train.steps uninterrupted,
    its newest checkpoint is of that step (an extension cut short leaves a later one and an earlier
    summary), and cfg is its config.yaml (an override is a resume's own: it goes the usual way, refused
    or noted); None otherwise."""
    out, steps = Path(cfg.train.out), cfg.train.steps
    if changed_keys(out / "config.yaml", cfg) or not (out / "config.yaml").is_file():
        return None
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    # with train.save_every=0 the run wrote no checkpoint, so none may be newer than its end either
    last = latest_checkpoint(out) if cfg.train.save_every else checkpoint_path(out, steps)
    if (not isinstance(summary, dict) or summary.get("steps") != steps or summary.get("interrupted")
            or last != checkpoint_path(out, steps) or not (out / "final").is_dir()):
        return None
    return summary


def resume_records(out: Path, p: Progress) -> None:
    """A resumed run's records as they were at its checkpoint: later steps and torn lines dropped; the
    evaluations and health findings the checkpoint knows kept (so a finished run's final evaluation and
    end-of-run findings, made after its last checkpoint, go, with its eval_after.jsonl: an extended run
    makes its own at its new end)."""
    for name in ("metrics.jsonl", "samples.jsonl"):
        truncate_jsonl(out / name, p.step)
    truncate_jsonl(out / "evals.jsonl", keep=len(p.eval_rows))
    truncate_jsonl(out / "health.jsonl", keep=len(p.fired))  # each rule fires once: a line per rule fired
    (out / "eval_after.jsonl").unlink(missing_ok=True)


def try_checkpoint(run: Run, p: Progress, train_seconds: float, pending: dict | None = None) -> None:
    """Every rank takes part (FSDP gathers); rank 0 writes. A failed write (disk full, permissions) is
    reported and training goes on from memory."""
    state = checkpoint_state(run, p, train_seconds, pending)
    if not run.dist.is_main:
        return
    try:
        save_checkpoint(run.out, p.step, state, run.settings.checkpoint.keep)
    except OSError as e:
        last = latest_checkpoint(run.out)
        say(f"warning: checkpoint at step {p.step} could not be written ({e}); "
            + (f"{last} is still whole and usable" if last else "there is no earlier checkpoint"))


def save_final(run: Run) -> None:
    """RUN_DIR/final as a plain Hugging Face model (LoRA: merged, plus the adapter)."""
    m = run.models
    if not is_fsdp(m.policy):
        if run.dist.is_main:
            atomic_save_model(m.policy, m.tok, run.out / "final", base_model_path(run.settings.checkpoint.model_name))
        return
    state = full_state_dict(m.policy, run.dist)  # every rank gathers; rank 0 gets the weights
    if run.dist.is_main:
        c = run.settings.checkpoint
        plain, _ = load_model(c.model_name, c.model_dtype)
        plain.load_state_dict(state)
        atomic_save_model(plain, m.tok, run.out / "final")


class StopOnSignal:
    """SIGINT / SIGTERM ask the loop to stop after the current step; a second SIGINT abandons it.
    `checkpoint`: whether the stop writes one (train.save_every=0 writes none)."""

    def __init__(self, checkpoint: bool = True):
        self.signal: str | None = None
        self.checkpoint = checkpoint
        self._old = {}

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        say(f"{self.signal}: finishing step, " + ("writing a checkpoint, " if self.checkpoint else "")
            + "then exiting (SIGINT again to abandon)")

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
