"""What one sandboxed run may use (`SandboxLimits`) and how it is isolated (`Sandbox`): plain data,
read by the launcher (rlimits), the run (wall clock, caps) and the code reward's config."""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(kw_only=True, frozen=True)
class SandboxLimits:
    """Per program run. memory_bytes is each process's address space; run_memory_bytes the whole
    run's (cgroup, no swap). max_procs counts processes and threads of the run."""

    wall_s: float = 2.0
    cpu_s: float = 2.0
    memory_bytes: int = 512 * MiB
    run_memory_bytes: int = 2048 * MiB
    max_procs: int = 64
    stdout_bytes: int = 1 * MiB
    file_bytes: int = 16 * MiB
    open_files: int = 64
    tmp_bytes: int = 64 * MiB
    channel_bytes: int = 4 * MiB

    def __post_init__(self):
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


@dataclass(kw_only=True, frozen=True)
class Sandbox:
    """How to isolate. bwrap: its path (None: look it up on PATH); unsafe: allow running without
    it (None: read RLVR_UNSAFE_NO_SANDBOX); isolate=False skips bubblewrap on purpose (needs
    unsafe); host_uid: the unprivileged host uid bwrap runs as when we are root."""

    bwrap: str | None = None
    python: str | None = None
    unsafe: bool | None = None
    isolate: bool = True
    host_uid: int = 65534
