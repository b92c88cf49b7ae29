"""An operator's files: the ones a flag reads (--rules, --slos,
PHASEMETER_SLOS) and the ones a command writes (--out). A path that cannot
be written is the flag's error (exit 2), and nothing is left half-made."""

from __future__ import annotations

from pathlib import Path

from phasemeter.timeparse import ArgError


def read_text(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8")


def write_file(path: str | Path, data: bytes) -> Path:
    """Where `--out` files go."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    except OSError as exc:
        raise ArgError(f"--out {path}: cannot write it: {exc.strerror or exc}") from None
    return Path(path)
