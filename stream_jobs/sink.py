"""Batched, idempotent writes of derived rows and dead letters to ClickHouse.

Why it is exactly-once (details in docs/delivery.md):
* the agent acks (and Faust commits) a batch's offsets only after `write`
  returned, so a crash re-delivers, never skips;
* every row carries its source partition/offset, and the agent drops
  re-delivered records at or below the highest stored offset;
* a retried batch keeps its insert_deduplication_token, so a retry after an
  insert that did land (but whose reply was lost) is dropped by the table.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

import numpy as np
import pandas as pd

from phasemeter import queries
from phasemeter.runner import DirectRunner
from phasemeter.settings import redact

from .derive import ROW_COLUMNS

log = logging.getLogger("phasemeter.sink")
DLQ_COLUMNS = ("ts", "reason", "detail", "payload", "payload_size", "src_topic", "src_partition", "src_offset")


def batch_token(kind: str, offsets: list[tuple[str, int, int]]) -> str:
    """Deterministic: the same records (same boundaries) give the same token."""
    spans: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in offsets:
        span = spans.setdefault((topic, partition), [offset, offset])
        span[0], span[1] = min(span[0], offset), max(span[1], offset)
    text = ";".join(f"{t}/{p}:{lo}-{hi}" for (t, p), (lo, hi) in sorted(spans.items()))
    return f"{kind}:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _frame(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=list(columns))
    # Epoch seconds -> exact milliseconds (float -> ns would lose the last ms).
    ms = np.round(df["ts"].to_numpy(dtype="float64") * 1000.0).astype("int64")
    df["ts"] = pd.to_datetime(ms, unit="ms", utc=True)
    return df


class Sink:
    """Owns the store client; `write` retries with capped backoff, never drops."""

    def __init__(self, client, dsn: str, max_backoff_s: float = 30.0):
        self.client = client
        self.dsn = dsn
        self.max_backoff_s = max_backoff_s
        self.lock = threading.Lock()  # one statement at a time on the client
        self.runner = DirectRunner(client, self.lock)  # reads share the lock
        self.paused_reason: str | None = None
        self.rows_written = 0
        self.dead_written = 0
        self.retries = 0

    def write(self, rows: list[dict], dead: list[dict]) -> None:
        """Insert both kinds; blocks (retrying) until the store accepted them."""
        backoff = 0.2
        while True:
            try:
                self._insert(rows, dead)
                self.paused_reason = None
                return
            except Exception as exc:  # store down/locked: pause, keep the batch
                self.retries += 1
                self.paused_reason = f"store write failed: {redact(str(exc))[:300]}"
                log.warning("%s; retrying in %.1fs", self.paused_reason, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    def _insert(self, rows: list[dict], dead: list[dict]) -> None:
        with self.lock:
            for table, items, columns in (("generations", rows, ROW_COLUMNS),
                                          ("dead_letters", dead, DLQ_COLUMNS)):
                if not items:
                    continue
                token = batch_token(table, [(r["src_topic"], r["src_partition"], r["src_offset"])
                                            for r in items])
                self.client.insert_df(table, _frame(items, columns), settings={
                    "insert_deduplication_token": token,
                    "deduplicate_blocks_in_dependent_materialized_views": 1,
                })
        self.rows_written += len(rows)
        self.dead_written += len(dead)

    def stored_offsets(self, topic: str) -> dict[int, int]:
        return queries.stored_offsets(self.runner, topic)
