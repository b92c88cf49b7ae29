"""A worker owning a store of known rows, with its SQL interface on a free
port: shared by tests/integration/test_sql_*.py.

A subprocess writes the store (chDB opens a path in one process only), then
`phasemeter worker` owns it and serves the SQL interface.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from conftest import WorkerProc, worker_env, write_store_in_subprocess

N = 1500
SEED = 5


def write_store(t0: float) -> None:
    """In a subprocess: migrate and write the known rows."""
    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    Sink.over(client, settings.store_dsn).write(synthetic_rows(N, t0, 3600, seed=SEED), [])
    client.close()


def written_models(t0: float) -> dict[str, int]:
    from phasemeter.demo.rows import synthetic_rows

    counts: dict[str, int] = {}
    for row in synthetic_rows(N, t0, 3600, seed=SEED):
        counts[row["model"]] = counts.get(row["model"], 0) + 1
    return counts


def sql_env(kafka_bootstrap: str, tmp: Path, **extra: str) -> dict:
    return worker_env(kafka_bootstrap, tmp / "data", pythonpath=(Path(__file__).parent,), **extra)


def written(env: dict, t0: float) -> None:
    write_store_in_subprocess(env, "sql_worker", t0)


def start(env: dict, tmp: Path, t0: float | None) -> WorkerProc:
    """The worker over a store of known rows (written first unless t0 is None)."""
    if t0 is not None:
        written(env, t0)
    w = WorkerProc(env, tmp, int(env["PHASEMETER_WEB_PORT"])).start()  # returns once its SQL interface answers
    w.sql_port = int(env["PHASEMETER_SQL_PORT"])
    w.sql_url = f"http://127.0.0.1:{w.sql_port}/"
    return w


def post(url: str, sql: str | bytes = b"", headers: dict | None = None, **params: str):
    """(status, headers, body) of one request, errors included."""
    target = url + ("?" + urllib.parse.urlencode(params) if params else "")
    data = sql.encode() if isinstance(sql, str) else sql
    request = urllib.request.Request(target, data=data or None, headers=headers or {},
                                     method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()
