"""Reading an operator's file (--rules, --slos, PHASEMETER_SLOS).

Normally from disk. When the worker runs a read command for a CLI
(phasemeter.query.served), the file is the CLI's, not the worker's: the CLI
sends each one's text with the command, under the name it was given, and
reads of that name in that thread return it. So a relative path means the
CLI's folder, a worker on another host sees the operator's file, and every
message naming the file reads as it would have in the CLI.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

_local = threading.local()


def read_text(path: str | Path) -> str:
    sent = getattr(_local, "sent", None)
    if sent is None:
        return Path(path).read_text(encoding="utf-8")
    # Served: the CLI's copy or nothing. The worker's own disk is never read
    # for a request, so a caller of its port cannot make it open a file.
    copy = sent.get(str(path), {"error": "not sent with the command"})
    if "error" in copy:  # the CLI could not read it either: the same failure
        raise OSError(0, copy["error"])
    return copy["text"]


def snapshot(paths) -> dict[str, dict]:
    """The CLI side: each named file's text, or why it cannot be read."""
    out = {}
    for path in paths:
        try:
            out[str(path)] = {"text": Path(path).read_text(encoding="utf-8")}
        except OSError as exc:
            out[str(path)] = {"error": exc.strerror or str(exc)}
    return out


@contextlib.contextmanager
def sent(files: dict[str, dict]):
    """The worker side: reads in this thread see the CLI's files."""
    _local.sent = dict(files)
    try:
        yield
    finally:
        _local.sent = None
