"""The one exception type a user can cause; the CLI prints its message without a traceback."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import sys


class RlvrError(Exception):
    """A problem with the user's input (config, model path, dataset row, reward function)."""


def decode_utf8(data: bytes, path) -> str:
    """A file's bytes as UTF-8 text (a leading byte-order mark dropped); bytes that are not UTF-8 are
    refused naming the file, the line and the byte offset, which is what a user needs to find them."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise RlvrError(f"{path} line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at byte offset {e.start}); "
                        "save the file as UTF-8") from None


NO_SPACE = {errno.ENOSPC, errno.EDQUOT}  # a full disk, a full quota


class WriteError(RlvrError):
    """A file of the run could not be written (a full disk, permissions): the run stops with one line."""


def write_error(path, e: BaseException) -> WriteError:
    """One clear line for a write that failed: the path, and that the disk is full when it is (OSError's
    errno, or the text of a library's own error such as safetensors'), else the system's reason."""
    text, code = str(e), getattr(e, "errno", None)
    if code is None and (m := re.search(r"\(os error (\d+)\)", text)):  # safetensors' (Rust's) spelling
        code = int(m.group(1))
    if code in NO_SPACE or "No space left" in text or "StorageFull" in text:
        why = "the disk is full"
    elif code == errno.EFBIG:
        why = "the file size limit (ulimit -f) is reached"
    else:
        why = f"{type(e).__name__}: {text}"
    return WriteError(f"cannot write {path}: {why}")


class ExitCalled(SystemExit):
    """os._exit(code) called by loaded code (a reward, a tool, an environment) while a run is in progress
    (guard_os_exit): raised where it was called instead, so it is what sys.exit() there would be (a reward
    call's failure, an episode's error); one that reaches the command ends it with exit status 2 and this
    message, never 0 with no summary. A SystemExit of a code other than 0, should it escape anyway."""

    def __init__(self, code: int, where: str):
        super().__init__(code or 1)
        self.message = (f"os._exit({code}) called at {where} during the run: rlvr does not let loaded code end the "
                        "process (it would stop with no checkpoint, summary or final model, reading as success); "
                        "return or raise instead")

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def guard_os_exit():
    """While the block runs, os._exit in this process raises ExitCalled where it was called; a forked
    child (another PID) exits as it asked."""
    real, pid = os._exit, os.getpid()

    def _exit(code=0):
        if os.getpid() != pid:
            real(code)
        caller = sys._getframe(1)
        raise ExitCalled(code, f"{caller.f_code.co_filename}:{caller.f_lineno}")

    os._exit = _exit
    try:
        yield
    finally:
        os._exit = real
