"""Find the worker that owns the embedded store (see phasemeter.query.runner).

chDB opens a path in one process only. The worker writes
<data_dir>/worker.json while it runs: its pid, its web URL (`url`: the live
page, /health, /inflight) and the URL of its read-only ClickHouse HTTP
interface (`sql_url`). A reader finds the worker here and reads the store
through that interface with clickhouse-connect, exactly as it reads a
ClickHouse server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SQL_URL = "sql_url"  # worker.json's key for the worker's ClickHouse HTTP interface
DATABASE = "database"  # worker.json's key for the database the worker reads and writes


def state_file(data_path: Path) -> Path:
    return data_path / "worker.json"


def write_state(data_path: Path, url: str, database: str | None = None, **urls: str) -> None:
    """`urls`: the worker's other listeners by name (sql_url: its SQL interface).
    `database`: the one a read through the worker sees, which a reader checks
    its own against without asking the worker (`phasemeter.cli.main`)."""
    data_path.mkdir(parents=True, exist_ok=True)
    named = {DATABASE: database} if database is not None else {}
    state_file(data_path).write_text(json.dumps({"pid": os.getpid(), "url": url, **named, **urls}))


def clear_state(data_path: Path) -> None:
    try:
        info = json.loads(state_file(data_path).read_text())
        if info.get("pid") == os.getpid():
            state_file(data_path).unlink()
    except (OSError, ValueError):
        pass


def worker_state(data_path: Path) -> dict | None:
    """worker.json of a live worker that owns this data dir's store, else None."""
    try:
        info = json.loads(state_file(data_path).read_text())
        os.kill(int(info["pid"]), 0)
        return info if isinstance(info.get("url"), str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def worker_url(data_path: Path) -> str | None:
    """Web URL of a live worker that owns this data dir's store, else None."""
    info = worker_state(data_path)
    return info["url"] if info else None
