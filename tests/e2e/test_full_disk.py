"""A full disk, for real: the run directory on a small tmpfs (mounted here, so these run as root and skip
elsewhere). At start, during the metrics and during final/: one line naming the file and that the disk
is full, exit 2, no traceback; the checkpoints written before stay whole, and once there is space
`rlvr train --resume` ends the run as if nothing had happened (value for value)."""
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints
from tests.e2e.conftest import at_step
from tests.e2e.test_resume import RUN, read_jsonl, same_run
from tests.e2e.test_run_faults import learning_run


def _mount(path: Path, size: int) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


class Disk:
    """A tmpfs mounted at `path`; `resize(bytes)` remounts it smaller or larger with its files kept."""

    def __init__(self, path: Path):
        self.path = path

    def resize(self, size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)


@pytest.fixture
def disk(tmp_path):
    """A 64 MiB tmpfs."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if os.geteuid() != 0 or not _mount(mnt, 64 << 20):
        pytest.skip("mounting a tmpfs needs root (and a kernel that allows it)")
    try:
        yield Disk(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Disk) -> Path:
    """Every free byte of the disk taken by one file (written until the kernel says ENOSPC)."""
    filler = disk.path / "filler"
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * (1 << 16)
        try:
            while True:
                f.write(block)
        except OSError:
            pass
    for size in (4096, 512, 1):  # the last pages, to the byte
        with open(filler, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
    return filler


def error_lines(err: str) -> list[str]:
    """The lines rlvr's error printed (the progress bar's carriage returns may precede one)."""
    return ["rlvr: error:" + part.split("\n", 1)[0] for part in err.split("rlvr: error:")[1:]]


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_a_full_disk_at_start_is_one_line_and_the_same_start_works_with_space(disk, capsys):
    filler = fill(disk)
    out = disk.path / "run"
    assert main(["train", *RUN, "--train.steps=2", f"--train.out={out}"]) == 2
    err = capsys.readouterr().err
    line = error_lines(err)
    assert len(line) == 1 and "Traceback" not in err
    assert line[0].startswith(f"rlvr: error: cannot write {out}") and "the disk is full" in line[0], line
    filler.unlink()
    assert main(["train", *RUN, "--train.steps=2", "--train.overwrite=true", f"--train.out={out}"]) == 0


def test_a_disk_that_fills_during_the_run_stops_it_and_it_resumes_value_for_value(disk, learning, learning_alone,
                                                                                   capsys):
    """The disk fills as step 3 begins, its checkpoints of steps 1 and 2 written: a later write fails."""
    out, filled = disk.path / "run", []
    capsys.readouterr()
    with at_step(3, lambda: filled.append(fill(disk))):
        code = main(["train", *learning, "--train.save_every=1", "--train.keep_checkpoints=6", f"--train.out={out}"])
    err = capsys.readouterr().err
    assert code == 2 and len(filled) == 1, err
    (filler,) = filled
    line = error_lines(err)
    assert len(line) == 1 and "Traceback" not in err, err
    assert line[0].startswith(f"rlvr: error: cannot write {out}/") and ": the disk is full; the checkpoints up to " in line[0]
    assert line[0].endswith(f"are whole: free space, then continue with `rlvr train --resume {out}`")
    whole = checkpoints(out)
    assert len(whole) >= 2 and not list((out / "checkpoints").glob(".*.tmp"))
    filler.unlink()
    assert main(["train", "--resume", str(out)]) == 0
    same_run(learning_alone, out)


def test_a_disk_that_fills_writing_final_stops_there_and_the_resume_finishes(disk, tmp_path, capsys):
    args = [*learning_run(tmp_path), "--train.keep_checkpoints=6"]
    first = disk.path / "first"
    assert main(["train", *args, f"--train.out={first}"]) == 0
    whole, final = used(disk.path), sum(p.stat().st_size for p in (first / "final").rglob("*") if p.is_file())
    alone = tmp_path / "alone"
    shutil.move(str(first), alone)
    disk.resize(whole - final // 2)  # room for everything but half the final model
    out = disk.path / "run"
    capsys.readouterr()
    assert main(["train", *args, f"--train.out={out}"]) == 2
    err = capsys.readouterr().err
    line = error_lines(err)
    assert line == [f"rlvr: error: cannot write {out / 'final'}: the disk is full; the checkpoints up to "
                    f"step_000006.pt are whole: free space, then continue with `rlvr train --resume {out}`"], err
    assert not (out / "final").exists() and not list(out.glob(".final*"))  # no half model left behind
    disk.resize(64 << 20)
    assert main(["train", "--resume", str(out)]) == 0
    assert (out / "final" / "model.safetensors").is_file()
    same_run(alone, out)
    assert len(read_jsonl(out / "eval_after.jsonl")) == len(read_jsonl(alone / "eval_after.jsonl"))


def test_a_file_size_limit_names_the_file_without_root(tmp_path):
    """Where no tmpfs can be mounted, RLIMIT_FSIZE (ulimit -f) makes writes fail the same way (EFBIG): the
    checkpoint, the largest file, is reported and training goes on; final/ then stops the run in one line."""
    import resource
    import signal

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rlvr", "train", *RUN, "--train.steps=2", f"--train.out={out}"],
                          capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert done.returncode == 2, done.stderr
    assert "warning: checkpoint at step 2 could not be written" in done.stderr
    assert error_lines(done.stderr) == [f"rlvr: error: cannot write {out / 'final'}: the file size limit (ulimit -f) "
                                        "is reached; no checkpoint was written yet: free space, then start it again "
                                        f"with `rlvr train --resume {out}` (from step 0; with the same config it keeps "
                                        "the evaluation before training)"], done.stderr
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
