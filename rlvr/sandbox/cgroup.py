"""A cgroup per sandbox run, so memory and processes are bounded per run, not per process.

rlimits bound each process; a run of many processes (or memory charged to no process) can still
exhaust the machine, and the kernel's OOM killer may then pick the trainer. A per-run cgroup caps the
run's total: cgroup v2 `memory.max` with `memory.swap.max = 0` and `pids.max`, or on a v1 hierarchy
`memory.limit_in_bytes` (+ `memory.memsw.limit_in_bytes`, so no swap either) and `pids.max`. An OOM
inside the cgroup kills inside the cgroup.

The sandbox's first process joins the cgroup itself, before it executes bubblewrap (see
rlvr.sandbox.run), so nothing it starts can be outside. That needs write access to the cgroup
tree: as root, or a delegated subtree. Where neither exists, `create` returns None and the sandbox
falls back to per-process limits sized so that their sum stays within the run's budget.
"""
from __future__ import annotations

import functools
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


@dataclass(frozen=True)
class Layout:
    """Where run cgroups go: 'v2' with one parent dir, or 'v1' with memory and pids parents."""

    version: str
    memory: Path
    pids: Path


@dataclass(frozen=True)
class RunCgroup:
    layout: Layout
    dirs: tuple[Path, ...]   # one (v2) or two (v1: memory, pids)

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The files the run's first process writes "0" to, to join."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def oom_killed(self) -> bool:
        """Did the kernel kill a process of this run for going over the run's memory?"""
        name = "memory.events" if self.layout.version == "v2" else "memory.oom_control"
        try:
            text = (self.dirs[0] / name).read_text()
        except OSError:
            return False
        fields = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Remove the run's directories once its processes are gone (they may linger a moment as
        zombies being reaped by the kernel, hence the short retry)."""
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _own_path(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller, or for v2 when controller is ''."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") if controller else names == "":
            return path
    return None


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def _v2_layout() -> Layout | None:
    mount = ROOT if (ROOT / "cgroup.controllers").exists() else None
    own = _own_path("")
    if mount is None or own is None:
        return None
    base = mount / own.lstrip("/")
    parent = base / "rlvr-sandbox"
    try:
        parent.mkdir(exist_ok=True)
        # The runs' parent must offer memory and pids to its children; the no-internal-process rule
        # allows it because nothing runs in `parent` itself.
        enabled = (base / "cgroup.subtree_control").read_text().split()
        missing = [c for c in ("memory", "pids") if c not in enabled]
        if missing:
            (base / "cgroup.subtree_control").write_text(" ".join("+" + c for c in missing))
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return Layout("v2", parent, parent)


def _v1_layout() -> Layout | None:
    dirs = []
    for controller in ("memory", "pids"):
        own = _own_path(controller)
        if own is None:
            return None
        d = ROOT / controller / own.lstrip("/")
        if not _writable_dir(d):
            return None
        dirs.append(d)
    return Layout("v1", *dirs)


@functools.lru_cache(maxsize=1)
def layout() -> Layout | None:
    """Where this machine lets us make run cgroups, or None (then the fallback applies)."""
    return _v2_layout() or _v1_layout()


def remove_left_by(pid: int) -> None:
    """Remove the run cgroups a killed process had made (named for its pid; a judge worker killed
    mid-check cannot remove its own): their processes died with it."""
    lay = layout()
    if lay is not None:
        RunCgroup(lay, tuple(d for parent in {lay.memory, lay.pids} for d in parent.glob(f"rlvr-{pid}-*"))).remove()


def _write(path: Path, value) -> None:
    path.write_text(str(value))


def create(memory_bytes: int, max_procs: int) -> RunCgroup | None:
    """A fresh cgroup for one run with the given caps; None when none can be made here."""
    lay = layout()
    if lay is None:
        return None
    name = f"rlvr-{os.getpid()}-{next(_counter)}"
    dirs = (lay.memory / name,) if lay.version == "v2" else (lay.memory / name, lay.pids / name)
    made = []
    try:
        for d in dirs:
            d.mkdir()
            made.append(d)
        if lay.version == "v2":
            _write(dirs[0] / "memory.max", memory_bytes)
            if (dirs[0] / "memory.swap.max").exists():
                _write(dirs[0] / "memory.swap.max", 0)
            _write(dirs[0] / "pids.max", max_procs)
        else:
            _write(dirs[0] / "memory.limit_in_bytes", memory_bytes)
            if (dirs[0] / "memory.memsw.limit_in_bytes").exists():   # only with swap accounting
                _write(dirs[0] / "memory.memsw.limit_in_bytes", memory_bytes)
            else:
                _write(dirs[0] / "memory.swappiness", 0)
            _write(dirs[1] / "pids.max", max_procs)
    except OSError:
        RunCgroup(lay, tuple(made)).remove()
        return None
    return RunCgroup(lay, dirs)
