"""Text helpers below every package that prints, logs or compares text: bounded printable reasons, terminal-
safe console lines (`say`, the one way a run prints), and dataset values as the text checkers compare."""
from __future__ import annotations

import json
import sys
import traceback

from tqdm import tqdm

MAX_REASON_CHARS = 300


def clean_reason(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Printable text of bounded length: a reason may quote a program's exception message, and
    control characters (terminal escapes, carriage returns, bidi overrides) must not reach the
    console, logs or report as themselves (a hostile program chooses them). Each becomes its backslash escape."""
    text = str(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def traceback_text(error: BaseException) -> str:
    """An exception's traceback, each line printable: its message may quote model text."""
    return "\n".join(clean_reason(line, 2000) for line in "".join(traceback.format_exception(error)).splitlines())


def as_text(value):
    """A dataset value as the text rlvr's checkers compare: numbers as written, lists and dicts as JSON;
    None stays None."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence `say` (the other ranks of a torchrun job: one process prints)."""
    global _quiet
    _quiet = quiet


def terminal_safe(text: str) -> str:
    """text with every character a terminal could act on (ESC sequences: window title, clear screen,
    OSC 52 clipboard writes; carriage returns, bells, bidi overrides, lone surrogates) as its
    backslash escape; newlines stay. Model turns and tool output reach the console,
    and a model can write any of these."""
    return "\n".join(clean_reason(line, limit=sys.maxsize) for line in str(text).split("\n"))


def say(text: str) -> None:
    """Every console line of a run goes through here, escaped."""
    if not _quiet:
        tqdm.write(terminal_safe(text), file=sys.stderr)
