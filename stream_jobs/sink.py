"""Batched, idempotent writes of derived rows and dead letters to ClickHouse.

Exactly-once (docs/delivery.md): a partition's progress is recorded only after its batch is durable (ledger.py),
so a crash re-reads and never skips; the pipeline drops re-read rows the store holds; a retried insert keeps its
insert_deduplication_token; rollup cells a crashed insert may have missed are rebuilt from raw (`repair_rollup`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import Counter

from phasemeter.query.runner import DirectRunner
from phasemeter.settings import redact
from phasemeter.store import rollup

from . import dead_letter, ledger, refusals
from .columnar import Generations, columns_of, day_numbers
from .columnar import arrow_of as _arrow  # the dead letters' table

log = logging.getLogger("phasemeter.sink")
DLQ_COLUMNS = ("ts", "reason", "detail", "payload", "payload_size", "src_topic", "src_partition", "src_offset")


def batch_token(kind: str, offsets: list[tuple[str, int, int]]) -> str:
    """Same records, same token. Every offset counts, not just each partition's first and last: a re-read batch
    completing a half-landed insert may span the same offsets with fewer rows and must not pass for a retry."""
    return counted_token(kind, Counter(offsets).items())


def counted_token(kind: str, counted) -> str:
    """`batch_token` from ((topic, partition, offset), row count) pairs, as an envelope's rows share an offset."""
    h = hashlib.sha256()
    for (topic, partition, offset), n in sorted(counted):
        h.update(f"{topic}/{partition}:{offset};".encode() * n)
    return f"{kind}:" + h.hexdigest()[:32]


class StoreUnavailable(RuntimeError):
    pass


class SinkStopped(RuntimeError):
    """The stopping worker gave up on a failing store call; nothing of it is recorded, so its batch is re-read."""


class Sink:
    """Owns the store client; every call retries with capped backoff, never drops. `connect` runs lazily and
    again after a failure, so a worker can start while the store is down or locked (chDB held by another process)."""

    # The views' targets deduplicate a retried block only with this; bench/bench_sink.py may override it.
    insert_settings: dict = {"deduplicate_blocks_in_dependent_materialized_views": 1}

    def __init__(self, connect, dsn: str):
        self._connect = connect
        self.lock = threading.Lock()  # one statement at a time on the client
        self._connect_lock = threading.Lock()
        self.client = None
        self._runner: DirectRunner | None = None
        self.paused_reason: str | None = None
        self.retries = self.store_refused = 0
        # {"kind", "code", "during"} of the error a store call faces (refusals.classify), None after a success.
        # `last_refusal` stays visible after its rows were isolated.
        self.store_error: dict | None = None
        self.last_refusal: dict | None = None
        self._stopping = threading.Event()
        # A server limits a bound value's size (ledger.CRC_SLICE); the embedded store does not.
        self.crc_slice = None if dsn.startswith("chdb") else ledger.CRC_SLICE

    @classmethod
    def over(cls, client, dsn: str) -> "Sink":
        """A sink over an already-open client (the worker's first connection, tests, benchmarks)."""
        return cls(lambda: client, dsn)

    @property
    def runner(self) -> DirectRunner:
        """Reads for the web API; they share the write lock."""
        if self._runner is None:
            try:
                self._ensure()
            except Exception as exc:
                raise StoreUnavailable(redact(str(exc))[:300]) from None
        return self._runner

    def _ensure(self):
        with self._connect_lock:  # the web thread and the agent may both get here first
            if self.client is None:
                self.client = self._connect()
                self._runner = DirectRunner(self.client, self.lock)
        return self.client

    def retrying(self, what: str, fn, *args, refusable: bool = False):
        """Run fn(client, *args), holding the lock, until it succeeds: backpressure, never loss. After
        `stop_retrying`, a failure raises SinkStopped. If `refusable` (an insert), an error every retry would
        repeat raises Refused."""
        backoff = 0.2
        while True:
            try:
                client = self._ensure()
                # Callers build their tables before, outside the lock: the web API's reads need not wait for Python
                # (docs/performance/sink.md).
                with self.lock:
                    result = fn(client, *args)
                self.paused_reason = self.store_error = None
                return result
            except Exception as exc:  # store down/locked: pause, keep the batch
                kind = refusals.classify(exc)
                message = redact(str(exc))[:300]
                self.store_error = {"kind": kind.kind, "code": kind.code, "during": what}
                if refusable and kind.kind == refusals.DETERMINISTIC:
                    self.last_refusal = {**self.store_error, "message": message, "at": time.time()}
                    raise refusals.Refused(kind, message) from None
                self.retries += 1
                self.paused_reason = f"{what} failed: {message}"
                if not self._stopping.is_set():
                    log.warning("%s; retrying in %.1fs", self.paused_reason, backoff)
                    self._stopping.wait(backoff)  # wakes at once on stop_retrying
                if self._stopping.is_set():
                    raise SinkStopped(f"{self.paused_reason}; stopped retrying") from None
                backoff = min(backoff * 2, 30.0)

    def stop_retrying(self) -> None:
        """For a stopping worker, once its batch in hand ended or outlived the stop grace: asyncio cannot cancel
        a retry thread (the cut batch's, the reseek timer's), and the interpreter waits for it at exit
        (docs/delivery.md). A call stops at its next failure; a success returns."""
        self._stopping.set()

    def write(self, rows, dead: list[dict]) -> list[dict]:
        """Insert rows (columns, or dicts) and dead letters, blocking while the store is away. A retry re-sends
        the same tokens, so a half-landed attempt is not stored twice. Rows the store refuses for good are
        stored as dead letters and returned, for the caller to publish and count."""
        rows, built = columns_of(rows, time.time())
        refused = [d for _, d in built] + self._write_rows(rows)
        self._write_dead(dead + refused)
        self.store_refused += len(refused)
        return refused

    def _write_rows(self, rows: Generations, salt: str = "") -> list[dict]:
        """Insert generations, each insert within the store's partitions-per-block limit (refusals.partition_groups)."""
        if not len(rows):
            return []
        groups = refusals.partition_groups(day_numbers(rows.ts).tolist())
        base = counted_token("generations", rows.counted_offsets()) if len(groups) > 1 else None
        refused = []
        for g, group in enumerate(groups):
            part = rows if len(groups) == 1 else rows.take(group)

            def insert(indexes: list[int], path: str, part=part, g=g):
                items = part if len(indexes) == len(part) else part.take(indexes)
                token = counted_token("generations", items.counted_offsets()) if base is None else f"{base}/days{g}"
                # groups share the batch's token, numbered (an envelope's rows share offsets)
                self.retrying("store write", self._insert, "generations", items.arrow(),
                              token + (f"/{path}" if path else "") + salt, refusable=True)
            for i, why in refusals.isolate(list(range(len(part))), insert):
                refused.append(dead_letter.refused_row(part[i], why.kind.code, str(why), time.time()))
        return refused

    def _write_dead(self, dead: list[dict], salt: str = "") -> None:
        if not dead:
            return
        token = batch_token("dead_letters", [(d["src_topic"], d["src_partition"], d["src_offset"]) for d in dead])
        self.retrying("store write", self._insert, "dead_letters", _arrow(dead, DLQ_COLUMNS), token + salt)

    def _insert(self, client, table: str, arrow_table, token: str) -> None:
        client.insert_arrow(table, arrow_table, settings={**self.insert_settings, "insert_deduplication_token": token})

    def rewrite_dropped(self, rows, dead: list[dict]) -> int:
        """After `write`: rewrite under a fresh token, and count, the rows and dead letters the store lacks. A
        SIGKILL in an insert can leave a block's deduplication entry without its part, so a re-read passes for a
        retry (docs/delivery.md, "Why each failure point is safe"). Only a previous owner's records are at risk."""
        rows, _ = columns_of(rows, time.time())  # a row Arrow cannot take: its dead letter in `dead`
        keys = list(zip(*(rows.columns[k].to_pylist() for k in ("src_topic", "src_partition", "src_offset")),
                        rows.request_ids)) if len(rows) else []  # (topic, partition, offset, request_id) of each
        spans = ledger.offset_spans([k[:3] for k in keys] + [(d["src_topic"], d["src_partition"], d["src_offset"])
                                                             for d in dead])
        held = {key: self.stored_in_range(*key, lo, hi) for key, (lo, hi) in spans.items()}
        lost = [i for i, (t, p, o, rid) in enumerate(keys) if (o, rid) not in held[t, p].rows]
        lost_dead = [d for d in dead if d["src_offset"] not in held[d["src_topic"], d["src_partition"]].dead]
        salt = f"/{uuid.uuid4().hex}"
        # A row refused here was refused by `write` just before; its dead letter is in `dead`.
        if lost:
            self._write_rows(rows.take(lost), salt)
        self._write_dead(lost_dead, salt)
        return len(lost) + len(lost_dead)

    def positions(self, topics: list[str]) -> dict[tuple[str, int], int]:
        return self.retrying("reading progress", ledger.positions, topics)

    def record_progress(self, progress: dict[tuple[str, int], int]) -> None:
        self.retrying("writing progress", ledger.record, progress)

    def stored_max(self, topic: str) -> dict[int, int]:
        return self.retrying("reading stored offsets", ledger.stored_max, topic)

    def stored_in_range(self, topic: str, partition: int, lo: int, hi: int) -> ledger.Stored:
        return self.retrying("reading stored offsets", ledger.stored_in_range, topic, partition, lo, hi)

    def label_values(self) -> list[tuple[str, str, str]]:
        return self.retrying("reading label values", ledger.label_values)

    def existing_request_ids(self, asks: list[ledger.Ask]) -> list[set[str]]:
        return self.retrying("checking duplicates", ledger.existing_request_ids, asks, self.crc_slice)

    def repair_rollup(self, cells: set) -> list[tuple]:
        """Make the cells of both per-minute views (every bands-rollup tier, the SLO counts) equal to raw. A
        crash mid-repair leaves the batch unrecorded: it is re-read and repaired again, so it converges."""
        found = self.retrying("repairing the rollup", rollup.repair_cells, cells)
        return found + self.retrying("repairing the SLO counts", ledger.repair_slo, cells)
