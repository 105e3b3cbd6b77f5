"""What keeps a run directory one run's: whether a start may take it (refused when it holds another run,
replaced only once everything has loaded: check_run_dir, check_restart, prepare_run_dir), a lock (one process
writes it; the holder's PID named to the next), the leftovers of writes a kill cut short removed, and the
data files a run trained on (their fingerprints, recorded in the summary and checkpoints and checked when the
run resumes)."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

import yaml

from rlvr.checkpoint_files import CHECKPOINTS
from rlvr.errors import RlvrError, write_error
from rlvr.io import atomic_write_text
from rlvr.report.console import say

LOCK = ".rlvr.lock"  # hidden: check_run_dir does not count it as a file the directory holds


class RunLock:
    """An exclusive flock on RUN_DIR/.rlvr.lock, which holds the holder's PID. The kernel drops a flock
    when its process ends, however it ends (SIGKILL, power loss of a local disk aside), so a lock file
    left by a dead run is taken over, with a note naming the PID it held. `enabled` False (ranks of a
    torchrun job other than 0) holds nothing: rank 0 speaks for the job."""

    def __init__(self, out: str | Path, enabled: bool = True):
        self.out, self.enabled = Path(out), enabled
        self.path = self.out / LOCK
        self.fd: int | None = None
        self.made_dir = False

    def __enter__(self) -> "RunLock":
        if not self.enabled or (self.out.exists() and not self.out.is_dir()):
            return self  # a file where the directory should be: check_run_dir says so
        if not self.out.is_dir():
            try:
                self.out.mkdir(parents=True)
            except FileExistsError:
                pass  # another start made it a moment ago: the lock below decides
            except OSError as e:
                raise write_error(self.out, e) from None
            else:
                self.made_dir = True
        while self.fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise write_error(self.path, e) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                self._forget_dir()
                raise RlvrError(f"{self.out} is in use by another rlvr process (PID {holder}), which holds "
                                f"{self.path}: two processes must not write one run directory; wait until it "
                                f"ends (or stop it: kill {holder}) and then resume it, or choose another "
                                "directory with --train.out=DIR") from None
            if not _same_file(fd, self.path):  # its holder removed it as we opened it: lock the new one
                os.close(fd)
                continue
            left = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            if left and left != str(os.getpid()):
                say(f"{self.out}: taking over the lock of process {left}, which is no longer running")
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as e:
                os.close(fd)
                raise write_error(self.path, e) from None
            self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is None:
            return
        if _same_file(self.fd, self.path):  # removed while held, so the next holder never locks a dead inode
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None
        self._forget_dir()

    def _forget_dir(self) -> None:
        """A directory this start made and left empty goes again: a failed start leaves no trace."""
        if self.made_dir:
            try:
                self.out.rmdir()
            except OSError:
                pass


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


# What a write that a kill cut short leaves: a checkpoint's temporary file (checkpoints/.step_N.pt.tmp,
# gigabytes with a large model), an atomic write's temporary file (.NAME.XXXXXXXX) and a model save's
# temporary or old folder (.final.XXXXXXXX, .final.old).
def leftovers(out: Path, names: tuple[str, ...]) -> list[Path]:
    found = sorted((out / "checkpoints").glob(".step_*.tmp")) if (out / "checkpoints").is_dir() else []
    for name in names:
        found += sorted(out.glob(f".{name}.*"))
    return found


def remove_leftovers(out: Path, names: tuple[str, ...]) -> None:
    gone = leftovers(out, names)
    for path in gone:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if gone:
        say(f"{out}: removed {len(gone)} temporary file(s) of writes cut short: {', '.join(p.name for p in gone[:3])}"
            + (", ..." if len(gone) > 3 else ""))


# ---------------------------------------------------------------- the data a run trains on

def data_sources(task) -> list[Path]:
    """The files (or save_to_disk directories) a task config reads: task.name, task.heldout_file,
    task.ood_file and task.ood_name where they are files. Built-in and Hub tasks have none."""
    from rlvr.tasks.readers import is_file_source

    names = [task.name, task.heldout_file, task.ood_file, getattr(task, "ood_name", "")]
    return [Path(n) for n in dict.fromkeys(names) if n and is_file_source(n) and Path(n).exists()]


def _digest(path: Path) -> tuple[int, str]:
    """Size in bytes and sha256 of a file, or of a directory's files (their names and bytes, in order)."""
    h, size = hashlib.sha256(), 0
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
    return size, h.hexdigest()


def fingerprint(task) -> list[dict]:
    """What the run trains on, as the summary and each checkpoint record it: each data file's path,
    size and sha256."""
    out = []
    for path in data_sources(task):
        size, sha = _digest(path)
        out.append({"path": str(path), "bytes": size, "sha256": sha})
    return out


def check_data(recorded: list[dict] | None, task, checkpoint: Path) -> None:
    """Refuse to resume on data files that differ from those the checkpoint trained on: the prompt
    sampler's state indexes the rows it was built on, so a file that changed (or shrank: an IndexError
    later) would train on other problems than the run's or crash. Checkpoints written before
    fingerprints were recorded (None) are not checked."""
    if recorded is None:
        return
    for rec in recorded:
        path = Path(rec["path"])
        if not path.exists():
            raise RlvrError(f"{path}: the data file checkpoint {checkpoint} trained on is gone; put it back to resume")
        size, sha = _digest(path)
        if sha != rec["sha256"]:
            how = ("shrank" if size < rec["bytes"] else "grew" if size > rec["bytes"] else "changed")
            raise RlvrError(f"{path} {how} since checkpoint {checkpoint} was written ({rec['bytes']} bytes then, "
                            f"{size} now; sha256 {rec['sha256'][:12]}... then, {sha[:12]}... now): the run "
                            "resumes only on the data it trained on; restore that file, or start a new run on this one")


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
