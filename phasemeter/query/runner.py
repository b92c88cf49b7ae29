"""Run a named query from `sql/` over ClickHouse SQL, through clickhouse-connect.

Every read feature (bands, alerts, analytics, the live page) asks a Runner
for `df(name, params)` (a DataFrame) or `rows(name, params)` (plain Python
columns, what text outputs read without importing pandas): the named file's SQL with typed parameters bound by
ClickHouse ({name:Type}). There is one read protocol and one Runner; only
the store's address differs (`open_runner`):

* a ClickHouse server (CLICKHOUSE_URL=http(s)://...): that server;
* an embedded store no worker holds: chdb:///<data dir>/store, opened here;
* an embedded store a worker holds (chDB opens a path in one process only):
  the worker's read-only ClickHouse HTTP interface, found in its worker.json
  (phasemeter.query.remote), read exactly as a server is read;
* `--via URL`: that ClickHouse HTTP interface.

A reader never writes: its client runs every query with readonly=2
(ClickHouse refuses INSERT, DDL and the like; settings sent with a query stay
allowed, such as the rollup reads' tuning below). A target whose user is
already read-only is left as it is, and sent no setting.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from phasemeter.query.rows import Rows, from_result
from phasemeter.store.client import StoreError, load_sql
from phasemeter.store.read_tuning import SPLIT_SMALL_READS

if TYPE_CHECKING:  # imported where a frame is built: the worker's ingest path never needs pandas
    import pandas as pd

    from phasemeter.settings import Settings


# One reading policy for the rollup's band and latency queries: split even a
# small read across threads (phasemeter.store.read_tuning, where it is measured).
QUERY_SETTINGS = {"bands_rollup": SPLIT_SMALL_READS, "latency_rollup": SPLIT_SMALL_READS}


def changeable(client, settings: dict) -> dict:
    """The settings this client's user may change. The worker's SQL interface
    runs every query read-only as it is (no setting changes), and clickhouse-
    connect refuses to send a setting the server reports as fixed; tuning that
    cannot be sent is left out, never an error."""
    fixed = {name for name in settings if getattr(client.server_settings.get(name), "readonly", 0)}
    return {k: v for k, v in settings.items() if k not in fixed}


class DirectRunner:
    """A clickhouse-connect client (chDB or HTTP) and the lock its statements
    share: the worker's runner shares the sink's, one statement at a time."""

    def __init__(self, client, lock: threading.Lock | None = None):
        self.client = client
        self.lock = lock or threading.Lock()
        self._settings: dict[str, dict] = {}

    def df(self, name: str, params: dict) -> pd.DataFrame:
        with self.lock:
            return self.client.query_df(load_sql(name), parameters=params, settings=self._settings_of(name))

    def rows(self, name: str, params: dict) -> Rows:
        """As `df`, as plain Python columns (phasemeter.query.rows): no pandas."""
        with self.lock:
            return from_result(self.client.query(load_sql(name), parameters=params, settings=self._settings_of(name)))

    def _settings_of(self, name: str) -> dict | None:
        if name not in self._settings:
            self._settings[name] = changeable(self.client, QUERY_SETTINGS.get(name, {}))
        return self._settings[name] or None

    def close(self) -> None:
        self.client.close()


def read_settings(settings: Settings, via: str | None = None) -> Settings:
    """The settings a reader opens the store with: `via`, else the SQL
    interface of the worker that holds the embedded store, else `settings`."""
    from phasemeter.query.remote import SQL_URL, worker_state

    if via:
        return settings.replace(clickhouse_url=via)
    info = worker_state(settings.data_path) if settings.is_embedded else None
    if info is None:
        return settings
    if not info.get(SQL_URL):
        raise StoreError(no_sql_interface(info, settings.data_path))
    return settings.replace(clickhouse_url=info[SQL_URL])


def no_sql_interface(info: dict, data_path) -> str:
    """Why a reader cannot read the store a live worker holds."""
    return (f"a worker (pid {info['pid']}) holds the store at {data_path} but serves no ClickHouse HTTP "
            "interface: its PHASEMETER_SQL_PORT was taken (its log names the port), or it is an older "
            "version; restart it with a free PHASEMETER_SQL_PORT")


def read_only(client):
    """readonly=2 on every query of this client, unless its user already is
    read-only (a user's readonly=1 may not be changed, and needs no change)."""
    current = client.server_settings.get("readonly")
    if current is None or (not current.readonly and current.value == "0"):
        client.set_client_setting("readonly", "2")
    return client


def client_options(settings: Settings, target: Settings, via: str | None = None) -> dict:
    """clickhouse-connect options for a reader of `settings` opening `target`
    (read_settings(settings, via)). Through the worker that owns the embedded
    store (found in its worker.json, so on this machine) answers are asked
    uncompressed: they never leave the machine, and compressing and unpacking
    a 30-day answer (4,800 rows) cost ~20 ms of ~0.25 s (measured through a
    worker over 100M rows). A server or `--via` URL keeps the library's default."""
    through_worker = not via and settings.is_embedded and not target.is_embedded
    return {"compress": False} if through_worker else {}


def open_runner(settings: Settings, via: str | None = None) -> DirectRunner:
    """The reader's Runner: the store at `read_settings`' address, migrated,
    read-only. Creates nothing."""
    from phasemeter.store.client import open_migrated_store

    target = read_settings(settings, via)
    return DirectRunner(read_only(open_migrated_store(target, **client_options(settings, target, via))))


def worker_runner(settings: Settings, timeout_s: float = 120.0) -> DirectRunner:
    """A Runner on the SQL interface of the worker that holds `settings`'
    embedded store, and never the store itself: for callers beside a worker
    (the tests' and benchmarks' counts) that must not take its store while it
    is away. StoreError when no live worker serves one."""
    from phasemeter.query.remote import SQL_URL, worker_state
    from phasemeter.store.client import connect

    info = worker_state(settings.data_path) or {}
    if not info.get(SQL_URL):
        raise StoreError(f"no worker serves SQL over the store at {settings.data_path}")
    client = connect(settings.replace(clickhouse_url=info[SQL_URL]), create=False,
                     connect_timeout=timeout_s, send_receive_timeout=timeout_s)
    return DirectRunner(read_only(client))
