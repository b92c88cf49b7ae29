"""Run a named query from `sql/` either directly or through the worker.

Every read feature (bands, alerts, analytics) asks a Runner for
`df(name, params)`. DirectRunner binds params on the ClickHouse side;
HttpRunner sends the name and the typed params to the worker's read-only
`/query/named/<name>` endpoint, which runs the same DirectRunner there. So a
CLI command behaves the same whether or not a worker owns the embedded store.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import TYPE_CHECKING

from phasemeter.store.client import load_sql

if TYPE_CHECKING:  # imported where a frame is built: the worker's ingest path never needs pandas
    import pandas as pd


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


class DirectRunner:
    def __init__(self, client, lock: threading.Lock | None = None):
        self.client = client
        self.lock = lock or threading.Lock()

    def df(self, name: str, params: dict) -> pd.DataFrame:
        with self.lock:
            return self.client.query_df(load_sql(name), parameters=params)

    def close(self) -> None:
        self.client.close()


class HttpRunner:
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


def open_runner(settings, via: str | None = None):
    """HttpRunner when a worker owns the embedded store (or --via), else DirectRunner;
    in a command the worker serves (phasemeter.query.served), the worker's own runner."""
    from phasemeter.query.remote import worker_url
    from phasemeter.query.served import current

    if current() is not None:
        return current().runner

    url = via or (worker_url(settings.data_path) if settings.is_embedded else None)
    if url:
        return HttpRunner(url)
    from phasemeter.store.client import open_migrated_store

    return DirectRunner(open_migrated_store(settings))
