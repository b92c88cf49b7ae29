"""A CLI read command run inside the worker, for a CLI that stays light.

While a worker owns the embedded store, `phasemeter query bands` & co. send
their parsed command to the worker (phasemeter.cli.delegate), which runs the
very same command function there: on the worker's own runner, with what it
prints and the files it writes captured for this command alone and sent
back. The CLI process then needs neither chDB nor pandas (docs/performance/reads.md), and the
output is the direct path's by construction.

This module is the worker-side context of one such command. It imports
nothing heavy: the CLI imports it on every start.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from pathlib import Path

from phasemeter.files import sent
from phasemeter.timeparse import ArgError

_local = threading.local()
# One served command at a time: charts draw with matplotlib (not thread-safe)
# and every read shares the sink's store lock anyway.
_one_at_a_time = threading.Lock()
_handler = None


class Capture:
    """What one served command produced: its runner, stdout, stderr, files."""

    def __init__(self, runner):
        self.runner = _Borrowed(runner)
        self.stdout, self.stderr = io.StringIO(), io.StringIO()
        self.files: dict[str, bytes] = {}


class _Borrowed:
    """The worker's runner lent to a command: its close() must not close the
    worker's store client."""

    def __init__(self, runner):
        self._runner = runner

    def df(self, name: str, params: dict):
        return self._runner.df(name, params)

    def close(self) -> None:
        pass


class _PerThread:
    """sys.stdout/sys.stderr once commands are served: a thread that serves
    one writes into its Capture, every other thread (the worker's own output)
    to the stream it replaced, which answers everything else (fileno, isatty,
    encoding) as before."""

    def __init__(self, name: str, fallback):
        self._name, self._fallback = name, fallback

    def _target(self):
        capture = current()
        return getattr(capture, self._name) if capture else self._fallback

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, attr):
        return getattr(self._fallback, attr)


def current() -> Capture | None:
    """The served command of this thread, else None (a command run here)."""
    return getattr(_local, "capture", None)


@contextlib.contextmanager
def serving(runner, files: dict[str, dict]):
    """Run one command in this thread as served, reading the CLI's `files`
    (phasemeter.files): yields its Capture."""
    with _one_at_a_time, sent(files):
        for name in ("stdout", "stderr"):  # again each time: Faust may have swapped the stream
            if not isinstance(getattr(sys, name), _PerThread):
                setattr(sys, name, _PerThread(name, getattr(sys, name)))
        _local.capture = capture = Capture(runner)
        try:
            yield capture
        finally:
            _local.capture = None


def write_file(path: str | Path, data: bytes) -> Path:
    """Where `--out` files go: to disk, or (served) into the capture, for the
    CLI to write on its side. A path that cannot be written is the flag's error."""
    capture = current()
    if capture is not None:
        capture.files[str(path)] = data
        return Path(path)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    except OSError as exc:
        raise ArgError(f"--out {path}: cannot write it: {exc.strerror or exc}") from None
    return Path(path)


def set_handler(handler) -> None:
    """The function the worker runs a served request with: `handler(request)
    -> exit code`, set by the CLI's entry point (which owns the commands; the
    worker's web module cannot import the CLI without an import cycle)."""
    global _handler
    _handler = handler


def handler():
    return _handler
