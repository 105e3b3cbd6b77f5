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
from pathlib import Path

import numpy as np
import torch
import yaml

from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)

from rlvr.config.paths import changed_keys
from rlvr.errors import RlvrError
from rlvr.report.console import say
from rlvr.io import atomic_save_model, atomic_write_text
from rlvr.report.sinks import jsonl_records
from rlvr.models.loading import load_model
from rlvr.saved_model import TrainedFrom
from rlvr.train.distributed import full_state_dict, gather_objects, is_fsdp, load_full_state_dict
from rlvr.train.settings import weight_settings
from rlvr.train.state import Progress, Run
from rlvr.checkpoint_files import (CHECKPOINTS, checkpoint_path, checkpoints, checksum_file, latest_checkpoint,
                                   load_checkpoint)

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


def _configured_rates(m) -> tuple[list[dict], list[float]]:
    """Each optimizer group's hyperparameters (lr, weight decay, betas ...) and the schedule's base rates as
    this start's config made them."""
    groups = [{k: v.item() if isinstance(v, torch.Tensor) else v for k, v in g.items() if k != "params"}
              for g in m.optimizer.param_groups]
    return groups, list(m.scheduler.base_lrs)


def _keep_configured_rates(m, configured: tuple[list[dict], list[float]]) -> None:
    """Loading the optimizer's and the schedule's state puts back the hyperparameters they were saved with
    (each group's lr, initial_lr, weight_decay; the schedule's base_lrs): the config's are put back over them,
    and each group's lr is the schedule's at the checkpoint's step, so a resume with another optimizer.lr,
    weight_decay, warmup_steps or algo.value_lr updates with it from the next step. Unchanged settings give
    the saved values exactly (the schedule is a function of the step)."""
    groups, base_lrs = configured
    m.scheduler.base_lrs = base_lrs
    rates = [base * factor(m.scheduler.last_epoch) for base, factor in zip(base_lrs, m.scheduler.lr_lambdas)]
    for group, values, lr in zip(m.optimizer.param_groups, groups, rates):
        for k, v in {**values, "initial_lr": values.get("initial_lr", lr), "lr": lr}.items():
            if isinstance(group.get(k), torch.Tensor):  # torchao's AdamW8bit holds lr as a tensor its step reads
                group[k].fill_(v)
            else:
                group[k] = v
    m.scheduler._last_lr = [group["lr"] for group in m.optimizer.param_groups]  # what get_last_lr (the metric) reads


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
    configured = _configured_rates(m)  # this start's settings: what the saved state's groups would put back
    opt = state["optimizer"]
    if opt["format"] == "none":
        pass  # the fresh optimizer of this start is the one the checkpoint had
    elif opt["format"] == "full":
        set_optimizer_state_dict(m.policy, m.optimizer, optim_state_dict=opt["state"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        m.optimizer.load_state_dict(opt["state"])
    m.scheduler.load_state_dict(state["scheduler"])
    _keep_configured_rates(m, configured)
    run.data.sampler.load_state_dict(state["sampler"])
    rngs = state["rng"]  # one per rank that wrote it; on another number of ranks, rank 0's
    set_rng_state(rngs[d.rank] if len(rngs) == d.world else rngs[0])
    return Progress(**{**state["progress"], "fired": set(state["progress"]["fired"])})


def restore_checkpoint(run: Run, state: dict, path: Path, config: dict) -> Progress:
    """`restore`, with a checkpoint that does not fit this start's config (an override that changes what
    its weights are, the model, the optimizer's groups or the task's problems) said in one line naming
    the keys that differ from the run's config.yaml, instead of the error of whichever state failed to
    load, or (weights that would load into another model) of none. Any other key this start changes is
    said in a note. `config`: this start's config as plain values (to_dict's)."""
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
            changed = changed_keys(run.out / "config.yaml", config, ignore=("train.out",), limit=None)
            if changed:  # a learning rate, more steps, a dropout: the run goes on under them from the next step
                say(f"note: resuming with settings changed from the run's config.yaml: {', '.join(changed[:8])}; "
                    "they apply from the next step")
                _apply_changes(p, state, changed)
            return p
    changed = changed_keys(run.out / "config.yaml", config)
    raise RlvrError(f"checkpoint {path} does not fit this config ({why})"
                    + (f"; it differs from the run's config.yaml in {', '.join(changed)}" if changed else "")
                    + "; nothing in the run directory was changed: resume without those overrides")


def _apply_changes(p: Progress, state: dict, changed: list[str]) -> None:
    """What the checkpoint carries that a changed setting replaces: the batch collected for the next step
    under the old settings (rollout.overlap one_step_off) is collected again under the new ones, and
    algo.adaptive_entropy's coefficient starts again from a changed algo.entropy_coef."""
    keys = {c.split("=", 1)[0] for c in changed}
    if keys - {"train.steps"}:
        state["pending"] = None  # start() reads it after this: the next step collects its own batch
    if "algo.entropy_coef" in keys:
        p.entropy_coef = None  # the controller's start: algo.entropy_coef (train/grpo.py)


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


def finished_run(out: Path, steps: int, save_every: int, config: dict) -> dict | None:
    """The summary of the run in `out` when it finished under `config` (plain values, to_dict's) as it is, so
    a resume has nothing to do: its summary.json (written last, once the final model is saved) says it ended
    at train.steps (`steps`) uninterrupted, its newest checkpoint is of that step (an extension cut short
    leaves a later one and an earlier summary), and `config` is its config.yaml (an override is a resume's
    own: it goes the usual way, refused or noted); None otherwise."""
    out = Path(out)
    if changed_keys(out / "config.yaml", config) or not (out / "config.yaml").is_file():
        return None
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    # with train.save_every=0 the run wrote no checkpoint, so none may be newer than its end either
    last = latest_checkpoint(out) if save_every else checkpoint_path(out, steps)
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
    """RUN_DIR/final as a plain Hugging Face model (LoRA: merged, plus the adapter), with the record of its
    form and base (rlvr.saved_model: what rlvr eval loads it by)."""
    m, c = run.models, run.settings.checkpoint
    trained = TrainedFrom(name=c.model_name, dtype=c.model_dtype, quantize=c.model_quantize)
    if not is_fsdp(m.policy):
        if run.dist.is_main:
            atomic_save_model(m.policy, m.tok, run.out / "final", trained)
        return
    state = full_state_dict(m.policy, run.dist)  # every rank gathers; rank 0 gets the weights
    if run.dist.is_main:
        plain, _ = load_model(c.model_name, c.model_dtype)
        plain.load_state_dict(state)
        atomic_save_model(plain, m.tok, run.out / "final", trained)
