"""Run the harness (and the untrusted program in it) under bubblewrap, rlimits and a wall clock.

Layers, each with the threat it answers:
- bubblewrap: a new user, pid, network, ipc, uts and cgroup namespace (no network, cannot see or
  signal host processes), only /usr (and the interpreter) bound read-only so /root, /home, the
  repository and the host /tmp do not exist, a read-only root, a small private /tmp, no
  capabilities, uid 65534, no nested user namespaces, a cleared environment (no tokens or paths
  leak through variables), and --die-with-parent so killing bwrap ends the whole namespace;
- when we run as root, bwrap itself is started as an unprivileged host uid: root-run bwrap maps the
  sandbox user to host root, for which the kernel does not enforce RLIMIT_NPROC (a fork bomb would
  then be unlimited);
- rlimits set in the child before exec: address space (memory bombs), CPU seconds (busy loops),
  file size and private-/tmp size (disk fill), open files, no core dumps; and processes (fork
  bombs). Under bwrap the harness sets the process limit inside the new user namespace, before
  any untrusted code runs: there it counts that sandbox's processes only, whereas on bwrap itself
  it counts every process of the host uid, so one fork bomb stopped parallel sandboxes starting;
- a wall-clock deadline after which the process group gets SIGKILL, which cannot be caught or
  ignored; bwrap's pid namespace takes down every descendant, even one that left the group;
- stdout and the result pipe are read to a cap, so a flood costs bounded memory.
Without bubblewrap the run is refused unless unsafe mode is asked for; rlimits and the wall-clock
kill still apply then, the namespaces do not.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.rewards import harness

MiB = 1 << 20
UNSAFE_ENV = "RLVR_UNSAFE_NO_SANDBOX"
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap)"
HARNESS_SOURCE = Path(harness.__file__).read_text(encoding="utf-8")
_CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_STDERR_TAIL = 8192
_DRAIN_GRACE_S = 0.5   # after the program exits, how long its pipes may take to drain
_log = logging.getLogger(__name__)
_warned_unsafe = False


class SandboxUnavailable(RlvrError):
    """Bubblewrap is missing or cannot start a sandbox, and unsafe mode was not asked for."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per program run. nproc counts processes and threads of the sandbox user."""

    wall_s: float = 2.0
    cpu_s: float = 2.0
    memory_bytes: int = 512 * MiB
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


@dataclass(frozen=True)
class Sandbox:
    """How to isolate. bwrap: its path (None: look it up on PATH); unsafe: allow running without
    it (None: read RLVR_UNSAFE_NO_SANDBOX); isolate=False skips bubblewrap on purpose (needs
    unsafe); host_uid: the unprivileged host uid bwrap runs as when we are root."""

    bwrap: str | None = None
    python: str | None = None
    unsafe: bool | None = None
    isolate: bool = True
    host_uid: int = 65534


@dataclass(frozen=True)
class RunResult:
    stdout: bytes
    stderr_tail: str
    reports: dict        # case -> (status, text), from lines tagged with this run's secret
    duplicates: set      # cases reported more than once: a forgery attempt
    exit_code: int | None
    timed_out: bool
    output_too_large: bool
    wall_s: float

    def failure(self, limits: SandboxLimits) -> str | None:
        """Why the run failed as a whole (a short reason), or None when it exited cleanly."""
        if self.output_too_large:
            return "output too large"
        if self.timed_out:
            return f"timed out after {limits.wall_s:.1f}s"
        last = next((ln.strip() for ln in reversed(self.stderr_tail.splitlines()) if ln.strip()), "")
        if "MemoryError" in last:
            return "memory limit"
        rc = self.exit_code or 0
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0   # bwrap reports a signal as 128 + n
        if sig == signal.SIGXCPU:
            return "cpu time limit"
        if rc and not last and sig in signal.valid_signals():
            return f"crashed: killed by {signal.Signals(sig).name}"
        if rc:
            return f"crashed: {last[:200]}" if last else f"crashed: exit code {rc}"
        return None


def default_python() -> str:
    """The system interpreter: it lives under /usr, which the sandbox binds; a venv may not."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else os.path.realpath(sys.executable)


def unsafe_requested(sandbox: Sandbox) -> bool:
    if sandbox.unsafe is not None:
        return sandbox.unsafe
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=8)
def bwrap_options(bwrap: str) -> frozenset[str]:
    """Options this bwrap knows (--size arrived in 0.5, --disable-userns in 0.8)."""
    r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, env=_CHILD_ENV)
    return frozenset(w for w in (r.stdout + r.stderr).split() if w.startswith("--"))


def bwrap_argv(bwrap: str, python: str, limits: SandboxLimits) -> list[str]:
    """The bubblewrap command line up to (not including) the interpreter."""
    known = bwrap_options(bwrap)
    # A nested user namespace would hand the program a fresh set of (namespaced) capabilities.
    nested = ["--disable-userns"] if "--disable-userns" in known else []
    argv = [bwrap, "--unshare-all", "--unshare-user", *nested, "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if not prefix.startswith("/usr"):
        argv += ["--ro-bind", prefix, prefix]
    def size(n: int) -> list[str]:  # without --size a tmpfs is bounded by RLIMIT_FSIZE per file only
        return ["--size", str(n)] if "--size" in known else []
    # /dev is a bwrap tmpfs: make it read-only, with a small /dev/shm for multiprocessing locks.
    argv += ["--proc", "/proc", "--dev", "/dev", *size(8 * MiB), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", *size(limits.tmp_bytes), "--tmpfs", "/tmp",
             "--chdir", "/tmp", "--remount-ro", "/"]
    return argv


def _rlimits(limits: SandboxLimits, nproc: bool) -> list[tuple[int, int, int]]:
    """(resource, soft, hard), hard never above what we hold (raising it would fail unprivileged).
    nproc=False leaves the process limit to the harness, inside the sandbox's user namespace."""
    cpu = max(1, math.ceil(limits.cpu_s))
    wanted = [(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
              (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at soft, SIGKILL at hard
              (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
              (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
              (resource.RLIMIT_CORE, 0, 0)]
    if nproc:
        wanted.append((resource.RLIMIT_NPROC, limits.max_procs, limits.max_procs))
    out = []
    for res, soft, hard in wanted:
        held = resource.getrlimit(res)[1]
        cap = hard if held == resource.RLIM_INFINITY else min(hard, held)
        out.append((res, min(soft, cap), cap))
    return out


def _limiter(rlimits: list[tuple[int, int, int]]):
    """preexec_fn: runs in the forked child before exec. It only calls setrlimit, which takes no
    Python-level locks, so the usual preexec_fn-with-threads deadlock does not apply."""
    def apply():
        for res, soft, hard in rlimits:
            resource.setrlimit(res, (soft, hard))
    return apply


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str, python: str, uid: int | None) -> None:
    """Start one empty sandbox, so a bwrap that cannot work here (no user namespaces, say) is an
    error now, not a silent 0 for every completion."""
    argv = bwrap_argv(bwrap, python, SandboxLimits()) + [python, "-I", "-c", "pass"]
    r = subprocess.run(argv, capture_output=True, env=_CHILD_ENV, cwd="/", timeout=30,
                       start_new_session=True, **_identity(uid))
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()[-500:]
        raise SandboxUnavailable(f"bubblewrap at {bwrap} could not start a sandbox "
                                 f"(exit {r.returncode}): {err}")


def _identity(uid: int | None) -> dict:
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def _warn_unsafe(why: str) -> None:
    global _warned_unsafe
    if not _warned_unsafe:
        _warned_unsafe = True
        _log.warning("UNSAFE: running untrusted code WITHOUT a sandbox (%s). It can read your "
                     "files and use the network; only rlimits and the wall-clock kill apply. "
                     "To fix it, %s.", why, INSTALL_HINT)


def launcher(sandbox: Sandbox, limits: SandboxLimits) -> list[str]:
    """The argv prefix before the interpreter: bwrap's, or [] in unsafe mode. Raises
    SandboxUnavailable when bubblewrap is missing and unsafe mode is off."""
    python = sandbox.python or default_python()
    if not sandbox.isolate:
        if not unsafe_requested(sandbox):
            raise ValueError("Sandbox(isolate=False) runs code unsandboxed; it needs unsafe=True")
        _warn_unsafe("isolate=False")
        return []
    path = sandbox.bwrap or shutil.which("bwrap") or "/usr/bin/bwrap"
    if not os.access(path, os.X_OK):
        if unsafe_requested(sandbox):
            _warn_unsafe(f"bubblewrap not found at {path}")
            return []
        raise SandboxUnavailable(f"bubblewrap not found at {path}: running model-written code needs "
                                 f"a sandbox; {INSTALL_HINT}, or set {UNSAFE_ENV}=1 to run it "
                                 "unsandboxed at your own risk")
    _probe(path, python, _host_uid(sandbox))
    return bwrap_argv(path, python, limits)


def _host_uid(sandbox: Sandbox) -> int | None:
    return sandbox.host_uid if os.geteuid() == 0 else None


def _memfile(data: bytes) -> int:
    """A descriptor on an anonymous file holding data, positioned at 0 (never blocks a writer)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("rlvr-sandbox", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_harness(payload: dict, stdin: bytes | None = None, limits: SandboxLimits = SandboxLimits(),
                sandbox: Sandbox = Sandbox()) -> RunResult:
    """Run the harness on payload (see rlvr.rewards.harness) once, isolated and limited.

    A secret made for this run tags the harness's result lines; the parent keeps only those.
    """
    token = secrets.token_hex(16)
    prefix = launcher(sandbox, limits)
    python = sandbox.python or default_python()
    inner_nproc = limits.max_procs if prefix else None
    read_end, write_end = os.pipe()
    payload_fd = _memfile(_json_bytes({**payload, "token": token, "max_procs": inner_nproc}))
    stdin_fd = _memfile(stdin) if stdin is not None else subprocess.DEVNULL
    argv = prefix + [python, "-I", "-c", HARNESS_SOURCE, str(write_end), str(payload_fd)]
    started = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(
                argv, stdin=stdin_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(write_end, payload_fd), env=_CHILD_ENV, start_new_session=True,
                cwd="/" if prefix else tempfile.gettempdir(),
                preexec_fn=_limiter(_rlimits(limits, nproc=not prefix)), **_identity(_host_uid(sandbox)))
        finally:
            # Our copies must go, or the result pipe never reaches end-of-file.
            for fd in (write_end, payload_fd, stdin_fd):
                if fd >= 0:
                    os.close(fd)
        out, err, chan, timed_out, too_large = _collect(proc, read_end, limits, started)
    finally:
        os.close(read_end)
    reports, dupes = harness.parse_reports(chan, token)
    return RunResult(stdout=out, stderr_tail=err.decode("utf-8", "replace"), reports=reports,
                     duplicates=dupes, exit_code=proc.returncode, timed_out=timed_out,
                     output_too_large=too_large, wall_s=time.monotonic() - started)


def _json_bytes(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=True, allow_nan=False).encode("ascii")


def _exited(pid: int) -> bool:
    """Has pid exited? WNOWAIT leaves the zombie in place, so its pid (and process group id)
    cannot be reused before we have killed the group."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(pid: int) -> None:
    """SIGKILL cannot be caught or ignored; the group holds every descendant that stayed in it,
    and in bwrap mode killing bwrap ends the pid namespace, which takes the rest."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _collect(proc: subprocess.Popen, chan_fd: int, limits: SandboxLimits, started: float):
    """Read stdout, stderr and the result pipe until the program has exited and its pipes are
    drained, the wall clock runs out, or a cap is passed. The group is dead when this returns.

    Returns (stdout, stderr tail, channel, timed_out, output_too_large).
    """
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limits.stdout_bytes, chan_fd: limits.channel_bytes, err_fd: None}
    bufs = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        sel.register(fd, selectors.EVENT_READ)
    pidfd = _open_pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)  # readable once the process exits
    deadline, exited_at = started + limits.wall_s, None
    timed_out = too_large = False
    try:
        while not too_large and (exited_at is None or any(fd in caps for fd in sel.get_map())):
            now = time.monotonic()
            if exited_at is None and _exited(proc.pid):
                exited_at = now
                _kill_group(proc.pid)  # leftovers holding our pipes open die now
                continue
            end = deadline if exited_at is None else exited_at + _DRAIN_GRACE_S
            if now >= end:
                timed_out = exited_at is None
                break
            wait = end - now if pidfd is not None else min(end - now, 0.01)
            too_large = _read_ready(sel.select(wait), sel, bufs, caps, pidfd)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        _kill_group(proc.pid)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), bytes(bufs[chan_fd]), timed_out, too_large


def _read_ready(events, sel, bufs: dict, caps: dict, pidfd: int | None) -> bool:
    """Read what is ready into bufs; True when a capped buffer went over its cap."""
    too_large = False
    for key, _ in events:
        if key.fd == pidfd:
            sel.unregister(pidfd)  # it stays readable; the loop now sees the exit itself
            continue
        chunk = os.read(key.fd, 1 << 16)
        if not chunk:
            sel.unregister(key.fd)
            continue
        buf, cap = bufs[key.fd], caps[key.fd]
        buf += chunk
        if cap is None:
            del buf[:-_STDERR_TAIL]     # stderr: only its end matters (the last line)
        elif len(buf) > cap:
            del buf[cap:]               # read at most the cap; the flood is a failure
            too_large = True
    return too_large


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python < 3.9 or Linux < 5.3: poll instead
        return None
