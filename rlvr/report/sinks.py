"""Run-directory writers: JSONL lines are appended with one write each and flushed, so a crash leaves at
most a torn last line (which a resume drops). Whole-file writes are rlvr.io's (atomic)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from rlvr.errors import write_error
from rlvr.io import json_safe


class JsonlWriter:
    """Appends one JSON line per record with one unbuffered write: a line is on disk (or cut short, which
    a resume drops) when write returns, and a failed write (a full disk) leaves nothing buffered to fail
    again at close; it is raised as one line naming the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise write_error(self.path, e) from None

    def write(self, record: dict) -> None:
        data = memoryview((json.dumps(json_safe(record)) + "\n").encode("ascii"))  # json.dumps escapes the rest
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def jsonl_records(path: str | Path):
    """(line number, line, record) for each non-empty line of a JSONL file; record is None for a line
    that is not a JSON object in UTF-8 (one a crash cut short: a kill mid-write, a full disk)."""
    for n, raw in enumerate(Path(path).read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            yield n, raw.decode("utf-8", "replace"), None
            continue
        yield n, line, record if isinstance(record, dict) else None


class NullWriter:
    """A JsonlWriter that writes nothing: the sinks of the ranks that do not own the run directory."""

    def write(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass
