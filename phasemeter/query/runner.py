"""Run a named query from `sql/` over ClickHouse SQL, through clickhouse-connect.

Every read feature (bands, alerts, analytics, the live page) asks a Runner
for `df(name, params)`: the named file's SQL with typed parameters bound by
ClickHouse ({name:Type}). There is one read protocol and one Runner; only
the store's address differs (`open_runner`):

* a ClickHouse server (CLICKHOUSE_URL=http(s)://...): that server;
* an embedded store no worker holds: chdb:///<data dir>/store, opened here;
* an embedded store a worker holds (chDB opens a path in one process only):
  the worker's read-only ClickHouse HTTP interface, found in its worker.json
  (phasemeter.query.remote), read exactly as a server is read;
* `--via URL`: that ClickHouse HTTP interface.

A reader never writes: its client runs every query with readonly=2
(ClickHouse refuses INSERT, DDL and the like; settings in a query's SETTINGS
clause stay allowed, which the named queries use). A target whose user is
already read-only is left as it is.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import TYPE_CHECKING

from phasemeter.store.client import StoreError, load_sql

if TYPE_CHECKING:  # imported where a frame is built: the worker's ingest path never needs pandas
    import pandas as pd

    from phasemeter.settings import Settings

def encode_params(params: dict) -> str:
    def enc(v):
        if isinstance(v, datetime):
            return {"$dt": v.isoformat()}
        return v
    return json.dumps({k: enc(v) for k, v in params.items()})


def decode_params(text: str) -> dict:
    def dec(v):
        if isinstance(v, dict) and set(v) == {"$dt"}:
            return datetime.fromisoformat(v["$dt"])
        if isinstance(v, dict):
            raise ValueError("nested objects are not query parameters")
        return v
    raw = json.loads(text or "{}")
    if not isinstance(raw, dict):
        raise ValueError("params must be a JSON object")
    return {str(k): dec(v) for k, v in raw.items()}


def frame_to_json(df: pd.DataFrame) -> dict:
    """Values as Python's json writes them: floats by repr, so every digit
    survives (pandas' to_json keeps at most 15 decimal places, which turned
    1e-20 into 0 and cut digits off small latencies). Nulls of any kind -> null."""
    import numpy as np
    import pandas as pd

    dtypes = {c: str(t) for c, t in df.dtypes.items()}
    columns = []
    for col, kind in dtypes.items():
        values = df[col]
        dtype = values.dtype
        if kind.startswith("datetime64"):
            columns.append([None if pd.isna(t) else pd.Timestamp(t).isoformat() for t in values])
        elif isinstance(dtype, np.dtype) and dtype.kind in "iub":
            columns.append(values.to_numpy().tolist())  # Python ints and bools, in C
        elif isinstance(dtype, np.dtype) and dtype.kind == "f":
            columns.append(json_floats(values.to_numpy()))
        elif isinstance(dtype, pd.StringDtype) or (isinstance(dtype, pd.api.extensions.ExtensionDtype)
                                                   and pd.api.types.is_integer_dtype(dtype)):
            # str, or nullable ints: Python str / int cells, None for the nulls
            columns.append(values.to_numpy(dtype=object, na_value=None).tolist())
        else:
            columns.append([_plain(v, pd.NA) for v in values.to_numpy(dtype=object)])
    return {"columns": list(df.columns), "dtypes": dtypes, "rows": [list(r) for r in zip(*columns)]}


def json_floats(values) -> list:
    """A numpy float array as JSON cells: Python floats, NaN as None. tolist()
    converts in C; a cell at a time took ~0.27 s for a day at 1-minute steps
    (28,800 rows x 20 columns). The worker's frames and the CLI's JSON
    (render.table.json_records) both write floats this way."""
    import numpy as np

    cells = values.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        cells[i] = None
    return cells


def encode_frame(df: pd.DataFrame) -> bytes:
    """`frame_to_json` as the JSON the worker sends. msgspec writes it ~10x
    faster than the standard library, but writes an infinity as null; a
    frame that holds one goes through the standard library, which writes
    Infinity, as the worker always did (json.loads reads it back as inf)."""
    import json

    import msgspec
    import numpy as np

    doc = frame_to_json(df)
    floats = df.select_dtypes(include="floating")
    if floats.shape[1] and np.isinf(floats.to_numpy(dtype=np.float64, na_value=np.nan)).any():
        return json.dumps(doc).encode()
    return msgspec.json.encode(doc)


def _plain(v, na):
    """One cell as JSON: numpy scalars as Python numbers, arrays (the SLO
    `counts`) as lists, nulls (None, NaN, pandas' `na`) as None."""
    if hasattr(v, "tolist") and getattr(v, "ndim", 0):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x, na) for x in v]
    null = v is None or v is na or (isinstance(v, float) and v != v)
    return None if null else (v.item() if hasattr(v, "item") else v)


def frame_from_json(payload: dict) -> pd.DataFrame:
    """The worker's frame back, each column in the dtype it had there: a
    nullable integer column (the rollup's counts over no rows) stays nullable
    instead of failing an int64 cast on its nulls."""
    import pandas as pd

    df = pd.DataFrame(payload["rows"], columns=payload["columns"])
    for col, kind in payload["dtypes"].items():
        if kind.startswith("datetime64"):
            df[col] = pd.to_datetime(df[col]).dt.tz_localize(None) if len(df) else pd.Series(dtype="datetime64[ns]")
        elif kind != "object":
            df[col] = df[col].astype(kind)
    return df


# A day of minute cells is a read under the size from which ClickHouse splits a
# read across threads (merge_tree_min_bytes_for_concurrent_read, 24 MiB), so it
# ran on one core. Each cell costs tens of microseconds to merge and finalize
# (its sketches), so even such a read is worth every core: in-process over 100M
# rows, 1 day at 1-minute steps took 0.66-0.84x the time for the bands and 0.65x
# for the latencies (BENCHMARKS.md, section 14). One reading policy for the
# rollup's band and latency queries.
SPLIT_SMALL_READS = {"merge_tree_min_rows_for_concurrent_read": 8192,
                     "merge_tree_min_bytes_for_concurrent_read": 1048576}
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
            if name not in self._settings:
                self._settings[name] = changeable(self.client, QUERY_SETTINGS.get(name, {}))
            return self.client.query_df(load_sql(name), parameters=params, settings=self._settings[name] or None)

    def close(self) -> None:
        self.client.close()


class HttpRunner:
    """The worker's `/query/named` endpoint: not a reader's path any more (readers use
    open_runner); the test and benchmark helpers that count a worker's rows use it
    until they read through the worker's SQL interface."""

    def __init__(self, url: str, timeout_s: float = 120.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def df(self, name: str, params: dict) -> pd.DataFrame:
        query = urllib.parse.urlencode({"params": encode_params(params)})
        target = f"{self.url}/query/named/{urllib.parse.quote(name)}?{query}"
        try:
            with urllib.request.urlopen(target, timeout=self.timeout_s) as resp:
                return frame_from_json(json.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            try:
                body = json.loads(body)["error"]
            except (ValueError, KeyError):
                pass
            raise RuntimeError(f"worker at {self.url} refused query {name!r}: {body}") from None
        except urllib.error.URLError as exc:
            raise RuntimeError(f"worker at {self.url} unreachable: {exc.reason}") from None

    def close(self) -> None:
        pass


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
        raise StoreError(f"a worker (pid {info['pid']}) holds the store at {settings.data_path} but serves no "
                         "ClickHouse HTTP interface: restart it with this version of phasemeter")
    return settings.replace(clickhouse_url=info[SQL_URL])


def read_only(client):
    """readonly=2 on every query of this client, unless its user already is
    read-only (a user's readonly=1 may not be changed, and needs no change)."""
    current = client.server_settings.get("readonly")
    if current is None or (not current.readonly and current.value == "0"):
        client.set_client_setting("readonly", "2")
    return client


def open_runner(settings: Settings, via: str | None = None) -> DirectRunner:
    """The reader's Runner: the store at `read_settings`' address, migrated,
    read-only. Creates nothing."""
    from phasemeter.store.client import open_migrated_store

    return DirectRunner(read_only(open_migrated_store(read_settings(settings, via))))
