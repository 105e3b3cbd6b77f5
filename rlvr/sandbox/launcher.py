"""What a sandbox's first process does to itself before it executes bubblewrap: join the run's cgroup,
raise its oom_score_adj, drop to the unprivileged uid, join a fresh session keyring, set rlimits.
(rlvr.sandbox.run starts it; the reasons for each layer are in its docstring.)

This runs in a small launcher process of its own (`launcher_argv`), not in a preexec_fn: to run a
preexec_fn, CPython's forked child first clears every other thread's state, which runs destructors
of whatever those threads held. The trainer calls sandboxes from worker threads while its main
thread holds torch's thread-local caches; after FSDP those reach a gloo process group, whose
destructor in the child waits for threads that do not exist there (a hang) or crashes (SIGSEGV), so
every program after it failed or the run stopped. A fresh interpreter has no such state.
"""
from __future__ import annotations

import math
import platform
import resource

from rlvr.sandbox.limits import SandboxLimits

_KEYCTL_NR = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
LAUNCH_FAILED = 125   # the launcher's exit status when a step fails (its message is on stderr)


def rlimits_for(limits: SandboxLimits, nproc: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard), hard never above what we hold (raising it would fail unprivileged).
    nproc=None leaves the process limit to the harness, inside the sandbox's user namespace."""
    # a second over cpu_s: the parent's load-free clock (rlvr.sandbox.clock), which counts a busy loop's
    # CPU time, gives the verdict; the kernel's limit is the backstop for a run the parent cannot see
    cpu = max(1, math.ceil(limits.cpu_s)) + 1
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


# Run as `python -I -S -c _LAUNCHER UID KEYCTL N CGROUP_FILE... M RESOURCE:SOFT:HARD... PROGRAM ARGS...`
# ("-" for no uid change or no keyring join): the standard library's cheapest modules only (json alone
# would double the start-up), nothing of the caller's. Order matters:
# - join the run's cgroup first, so every process the sandbox ever makes is inside it;
# - oom_score_adj 1000 while we may still write our /proc entry (raising it needs no privilege);
# - drop to the unprivileged uid (root-run bwrap would map the sandbox user to host root);
# - a fresh, empty session keyring owned by that uid (KEYCTL_JOIN_SESSION_KEYRING), so the caller's
#   keys are out of reach where no seccomp filter denies the keyring calls;
# - the rlimits last, after the uid change; then execute PROGRAM in this same process.
_LAUNCHER = """
import os
try:
    import resource, sys
    uid, keyctl, n, *rest = sys.argv[1:]
    cgroups, (m, *rest) = rest[:int(n)], rest[int(n):]
    rlimits, program = rest[:int(m)], rest[int(m):]
    for path in cgroups + ["/proc/self/oom_score_adj"]:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"1000" if path.endswith("oom_score_adj") else b"0")
        os.close(fd)
    if keyctl != "-":
        import ctypes   # before the uid change: that uid may not read our interpreter's library
    if uid != "-":
        os.setgroups([])
        os.setresgid(int(uid), int(uid), int(uid))
        os.setresuid(int(uid), int(uid), int(uid))
    if keyctl != "-":
        ctypes.CDLL(None, use_errno=True).syscall(int(keyctl), 1, None)
    for item in rlimits:
        res, soft, hard = map(int, item.split(":"))
        resource.setrlimit(res, (soft, hard))
    os.execvp(program[0], program)
except BaseException as e:
    os.write(2, ("rlvr sandbox launcher: %s: %s\\n" % (type(e).__name__, e)).encode())
    os._exit(""" + str(LAUNCH_FAILED) + """)
"""


def launcher_argv(python: str, rlimits: list[tuple[int, int, int]], cgroup_files: tuple[str, ...],
                  uid: int | None, join_keyring: bool) -> list[str]:
    """The argv prefix of a fresh interpreter that confines itself (cgroup, oom_score_adj, uid, keyring
    when join_keyring, rlimits) and then executes the rest of the argv (found on the PATH as subprocess
    would). It costs one interpreter start without site packages (a few milliseconds)."""
    keyctl = _KEYCTL_NR if join_keyring else None
    return [python, "-I", "-S", "-c", _LAUNCHER, "-" if uid is None else str(uid),
            "-" if keyctl is None else str(keyctl), str(len(cgroup_files)), *cgroup_files,
            str(len(rlimits)), *(f"{r}:{soft}:{hard}" for r, soft, hard in rlimits)]
