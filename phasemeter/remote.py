"""Route read queries to the worker while it owns the embedded store.

chDB opens a path in one process only. The worker writes
<data_dir>/worker.json (pid + web URL) while it runs; the CLI reads it and
asks the worker's read-only HTTP API instead of opening the store itself.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd

from .queries import BAND_COLUMNS


def state_file(data_path: Path) -> Path:
    return data_path / "worker.json"


def write_state(data_path: Path, url: str) -> None:
    data_path.mkdir(parents=True, exist_ok=True)
    state_file(data_path).write_text(json.dumps({"pid": os.getpid(), "url": url}))


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


def fetch_bands(url: str, params: dict, timeout_s: float = 60.0) -> tuple[pd.DataFrame, int]:
    query = urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/query/bands?{query}", timeout=timeout_s) as resp:
            payload = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail)["error"]
        except (ValueError, KeyError):
            pass
        raise RuntimeError(f"worker at {url} refused the query: {detail}") from None
    df = pd.DataFrame(payload["rows"], columns=BAND_COLUMNS)
    if not df.empty:
        df["t"] = pd.to_datetime(df["t"]).dt.tz_localize(None)
    counts = {"n", "prefill_n", "decode_n"}
    df = df.astype({c: ("int64" if c in counts else "float64") for c in BAND_COLUMNS[3:]})
    return df, int(payload["step_s"])
