"""Batched, idempotent writes of derived rows and dead letters to ClickHouse.

Exactly-once (docs/delivery.md): a partition's progress is recorded in the
store only after its batch is durable (ledger.py), so a crash re-reads and
never skips; the pipeline drops re-read rows the store holds; a retried
insert keeps its insert_deduplication_token; and rollup cells a crashed
insert may have missed are rebuilt from raw (`repair_rollup`).
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
    """Deterministic: the same records give the same token, and any other set
    of records another. Every offset counts, not only each partition's first
    and last: a re-read batch that completes a half-landed insert can span
    the same offsets with fewer rows, and must not be dropped as a retry."""
    return counted_token(kind, Counter(offsets).items())


def counted_token(kind: str, counted) -> str:
    """`batch_token` of rows given as ((topic, partition, offset), rows from
    it) pairs: the same bytes hashed, written once per record instead of once
    per row (an envelope's rows share its offset)."""
    h = hashlib.sha256()
    for (topic, partition, offset), n in sorted(counted):
        h.update(f"{topic}/{partition}:{offset};".encode() * n)
    return f"{kind}:" + h.hexdigest()[:32]


class StoreUnavailable(RuntimeError):
    pass


class SinkStopped(RuntimeError):
    """The worker is stopping and gave up on a call the store kept failing:
    nothing of it is recorded as done, so its batch is re-read."""


class Sink:
    """Owns the store client; every call retries with capped backoff, never drops.

    `connect` opens the client; it is called lazily and again after a
    failure, so a worker can start while the store is down or locked (chDB
    held by another process) and resume when it comes back.
    """

    # Sent with every insert, next to its insert_deduplication_token. The
    # views' target tables deduplicate a retried block only with the first.
    # An instance attribute may replace it (bench/bench_sink.py compares
    # candidates on this same code path).
    insert_settings: dict = {"deduplicate_blocks_in_dependent_materialized_views": 1}

    def __init__(self, connect, dsn: str):
        self._connect = connect
        self.lock = threading.Lock()  # one statement at a time on the client
        self._connect_lock = threading.Lock()
        self.client = None
        self._runner: DirectRunner | None = None
        self.paused_reason: str | None = None
        self.retries = self.store_refused = 0
        # The error a store call is facing, and of which kind (refusals.classify):
        # {"kind", "code", "during"}; None once a call succeeded. The last
        # deterministic refusal stays visible after its rows were isolated.
        self.store_error: dict | None = None
        self.last_refusal: dict | None = None
        self._stopping = threading.Event()
        # The duplicate check's statements: sliced for a server's limit on a
        # bound value, one per batch on the embedded store (ledger.CRC_SLICE).
        self.crc_slice = None if dsn.startswith("chdb") else ledger.CRC_SLICE

    @classmethod
    def over(cls, client, dsn: str) -> "Sink":
        """A sink over an already-open client (the worker's first connection,
        tests, benchmarks)."""
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
        """Run fn(client, *args) until it succeeds; backpressure, never loss.
        Once `stop_retrying` was called, a failure raises SinkStopped instead.
        `refusable` (an insert): an error that would repeat on every retry
        (refusals.classify) raises Refused instead of being retried."""
        backoff = 0.2
        while True:
            try:
                result = fn(self._ensure(), *args)
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
                stopped = self._stopping.is_set()
                if not stopped:
                    log.warning("%s; retrying in %.1fs", self.paused_reason, backoff)
                    stopped = self._stopping.wait(backoff)  # wakes at once on stop_retrying
                if stopped:
                    raise SinkStopped(f"{self.paused_reason}; stopped retrying") from None
                backoff = min(backoff * 2, 30.0)

    def stop_retrying(self) -> None:
        """For a stopping worker whose batch in hand outlived the grace: the
        retry loop runs in a thread that asyncio cannot cancel, and the
        interpreter waits for that thread at exit (docs/delivery.md). A call
        under way ends at its next failure; one that succeeds still returns."""
        self._stopping.set()

    def write(self, rows, dead: list[dict]) -> list[dict]:
        """Insert both kinds; blocks (retrying) while the store is away. A
        retry re-sends the same rows with the same tokens, so a half-landed
        attempt is not stored twice. Rows the store refuses for good are
        isolated and returned as dead letters (already stored with `dead`),
        for the caller to publish and count. `rows`: columns, or dicts
        (tests, benchmarks) turned into columns once (`columns_of`)."""
        rows, built = columns_of(rows, time.time())
        refused = [d for _, d in built] + self._write_rows(rows)
        self._write_dead(dead + refused)
        self.store_refused += len(refused)
        return refused

    def _write_rows(self, rows: Generations, salt: str = "") -> list[dict]:
        """generations, in inserts of at most the store's partitions per block
        (refusals.partition_groups), each isolating what the store refuses."""
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
                # one batch's groups: its token, numbered (an envelope's rows share offsets)
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
        # Tables are built before taking the lock, which the web API's reads
        # share: they need not wait while Python builds them (docs/performance/sink.md).
        with self.lock:
            client.insert_arrow(table, arrow_table,
                                settings={**self.insert_settings, "insert_deduplication_token": token})

    def rewrite_dropped(self, rows, dead: list[dict]) -> int:
        """After `write`: the rows and dead letters of it that the store does
        not hold are written again, under a token of this call's own, and
        counted. A SIGKILL inside an insert can leave the table's
        deduplication entry for the block without its part, and the table
        then drops the same records read again as a retry (docs/delivery.md,
        "Why each failure point is safe"). Only records a previous owner may
        have written are at risk, so the caller asks after those batches."""
        rows, _ = columns_of(rows, time.time())  # a row Arrow cannot take: its dead letter in `dead`
        keys = list(zip(*(rows.columns[k].to_pylist() for k in ("src_topic", "src_partition", "src_offset")),
                        rows.request_ids)) if len(rows) else []  # (topic, partition, offset, request_id) of each
        spans = ledger.offset_spans([k[:3] for k in keys] + [(d["src_topic"], d["src_partition"], d["src_offset"])
                                                             for d in dead])
        held = {key: self.stored_in_range(*key, lo, hi) for key, (lo, hi) in spans.items()}
        lost = [i for i, (t, p, o, rid) in enumerate(keys) if (o, rid) not in held[t, p].rows]
        lost_dead = [d for d in dead if d["src_offset"] not in held[d["src_topic"], d["src_partition"]].dead]
        salt = f"/{uuid.uuid4().hex}"
        # A row the store refuses here was refused by `write` just before:
        # its dead letter is in `dead` (the caller passes those `write` returned).
        if lost:
            self._write_rows(rows.take(lost), salt)
        self._write_dead(lost_dead, salt)
        return len(lost) + len(lost_dead)

    def _locked(self, client, fn, *args):
        with self.lock:
            return fn(client, *args)

    def positions(self, topics: list[str]) -> dict[tuple[str, int], int]:
        return self.retrying("reading progress", self._locked, ledger.positions, topics)

    def record_progress(self, progress: dict[tuple[str, int], int]) -> None:
        self.retrying("writing progress", self._locked, ledger.record, progress)

    def stored_max(self, topic: str) -> dict[int, int]:
        return self.retrying("reading stored offsets", self._locked, ledger.stored_max, topic)

    def stored_in_range(self, topic: str, partition: int, lo: int, hi: int) -> ledger.Stored:
        return self.retrying("reading stored offsets", self._locked, ledger.stored_in_range,
                             topic, partition, lo, hi)

    def label_values(self) -> list[tuple[str, str, str]]:
        return self.retrying("reading label values", self._locked, ledger.label_values)

    def existing_request_ids(self, topics: tuple[str, ...], ids: list[str], lo: float, hi: float) -> set[str]:
        return self.retrying("checking duplicates", self._locked, ledger.existing_request_ids,
                             topics, ids, lo, hi, self.crc_slice)

    def repair_rollup(self, cells: set) -> list[tuple]:
        """Both per-minute views of the cells made equal to raw: every tier of
        the bands rollup (phasemeter.store.rollup.repair_cells) and the SLO
        counts. A crash during the repair leaves the batch unrecorded: it is
        re-read and the repair runs again, so it converges."""
        found = self.retrying("repairing the rollup", self._locked, rollup.repair_cells, cells)
        return found + self.retrying("repairing the SLO counts", self._locked, ledger.repair_slo, cells)
