"""What the sandbox's child does to itself between fork and exec of bubblewrap: join the run's cgroup,
raise its oom_score_adj, drop to the unprivileged uid, join a fresh session keyring, set rlimits.
(rlvr.rewards.sandbox starts the child; the reasons for each layer are in its docstring.)"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.rewards.sandbox import SandboxLimits

_syscall = ctypes.CDLL(None, use_errno=True).syscall
_KEYCTL_NR = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
_KEYCTL_JOIN_SESSION_KEYRING = 1


def rlimits_for(limits: SandboxLimits, nproc: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard), hard never above what we hold (raising it would fail unprivileged).
    nproc=None leaves the process limit to the harness, inside the sandbox's user namespace."""
    cpu = max(1, math.ceil(limits.cpu_s))
    wanted = [(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
              (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at soft, SIGKILL at hard
              (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
              (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
              (resource.RLIMIT_CORE, 0, 0)]
    if nproc is not None:
        wanted.append((resource.RLIMIT_NPROC, nproc, nproc))
    out = []
    for res, soft, hard in wanted:
        held = resource.getrlimit(res)[1]
        cap = hard if held == resource.RLIM_INFINITY else min(hard, held)
        out.append((res, min(soft, cap), cap))
    return out


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def child_setup(rlimits: list[tuple[int, int, int]], cgroup_files: tuple[str, ...], uid: int | None):
    """preexec_fn: runs in the forked child before it executes bubblewrap. It calls only os-level
    functions and a libc function resolved at import, which take no Python-level locks, so the
    usual preexec_fn-with-threads deadlock does not apply. Order matters:
    - join the run's cgroup first, so every process the sandbox ever makes is inside it;
    - oom_score_adj 1000 while we may still write our /proc entry (raising it needs no privilege);
    - drop to the unprivileged uid (root-run bwrap would map the sandbox user to host root);
    - a fresh, empty session keyring owned by that uid, so the caller's keys are out of reach even
      if seccomp is unavailable (where keyctl is already denied to us, it is denied to the child);
    - the rlimits last, after the uid change."""
    def apply():
        for path in cgroup_files:
            _write_file(path, b"0")
        _write_file("/proc/self/oom_score_adj", b"1000")
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        if _KEYCTL_NR is not None:
            _syscall(_KEYCTL_NR, _KEYCTL_JOIN_SESSION_KEYRING, None)
        for res, soft, hard in rlimits:
            resource.setrlimit(res, (soft, hard))
    return apply
