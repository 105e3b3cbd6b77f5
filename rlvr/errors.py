"""The one exception type a user can cause; the CLI prints its message without a traceback."""
from __future__ import annotations

import errno
import re


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
