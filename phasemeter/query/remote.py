"""Find the worker that owns the embedded store (see phasemeter.query.runner).

chDB opens a path in one process only. The worker writes
<data_dir>/worker.json (pid + web URL) while it runs; the CLI reads it and
asks the worker's read-only HTTP API instead of opening the store itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def state_file(data_path: Path) -> Path:
    return data_path / "worker.json"


def write_state(data_path: Path, url: str, **urls: str) -> None:
    """`urls`: the worker's other listeners by name (sql_url: its SQL interface)."""
    data_path.mkdir(parents=True, exist_ok=True)
    state_file(data_path).write_text(json.dumps({"pid": os.getpid(), "url": url, **urls}))


def clear_state(data_path: Path) -> None:
    try:
        info = json.loads(state_file(data_path).read_text())
        if info.get("pid") == os.getpid():
            state_file(data_path).unlink()
    except (OSError, ValueError):
        pass


def worker_url(data_path: Path) -> str | None:
    """URL of a live worker that owns this data dir's store, else None."""
    try:
        info = json.loads(state_file(data_path).read_text())
        os.kill(int(info["pid"]), 0)
        return info["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
