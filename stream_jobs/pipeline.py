"""The per-batch work of the stream job, kept out of the Faust closure.

`Pipeline.split(events)` turns a batch of Kafka records into rows and dead
letters: it skips records already stored (exactly-once after a crash or a
rebalance), runs the pure derivation on each, and dead-letters duplicate
deliveries. No Faust import here: the agent in app.py is a thin loop over it.
"""

from __future__ import annotations

import base64
import logging
import time

from phasemeter.settings import Settings

from . import reasons as R
from .buckets import Bucketer, parse_edges
from .derive import Rejection, process_message
from .sink import Sink

log = logging.getLogger("phasemeter.worker")


class Pipeline:
    """State the agent needs between batches, kept out of the Faust closure."""

    def __init__(self, settings: Settings, sink: Sink):
        self.settings = settings
        self.sink = sink
        self.bucket = Bucketer(parse_edges(settings.bucket_edges))
        self.stored: dict[int, int] | None = None  # partition -> highest stored offset
        self.exact: dict[int, set[int]] = {}  # partition -> stored offsets at/below that max
        self.consumed = self.skipped = self.accepted = self.rejected = self.duplicates = 0
        self.started = time.time()
        self.last_batch_at: float | None = None
        self.last_batch: dict | None = None

    def forget_offsets(self) -> None:
        """After a rebalance another worker may have stored more: re-read."""
        self.stored = None
        self.exact = {}

    def _already_stored(self, events) -> set[tuple[int, int]]:
        """(partition, offset) of re-delivered records that are in the store.

        Records above a partition's stored maximum are new. At or below it, the
        first batch after (re)assignment asks the store which exact offsets it
        holds, so a batch that was only partly stored is completed, not skipped.
        """
        lows: dict[int, int] = {}
        for event in events:
            p, o = event.message.partition, event.message.offset
            if o <= self.stored.get(p, -1) and p not in self.exact:
                lows[p] = min(lows.get(p, o), o)
        for p, lo in lows.items():
            self.exact[p] = self.sink.stored_in_range(self.settings.topic, p, lo, self.stored[p])
        return {(e.message.partition, e.message.offset) for e in events
                if e.message.offset <= self.stored.get(e.message.partition, -1)
                and e.message.offset in self.exact.get(e.message.partition, ())}

    def _drop_duplicates(self, rows: list[dict], dead: list[dict], now: float) -> list[dict]:
        """A generation whose request_id is already stored (or earlier in this
        batch) is a duplicate delivery from the gateway: dead-letter it."""
        if not rows:
            return rows
        ts = [r["ts"] for r in rows]
        ids = list({r["request_id"] for r in rows})
        seen = self.sink.existing_request_ids(self.settings.topic, ids, min(ts) - 0.002, max(ts) + 0.002)
        kept = []
        for row in rows:
            if row["request_id"] in seen:
                dead.append({"ts": now, "reason": R.DUPLICATE,
                             "detail": f"request_id {row['request_id'][:128]} already stored",
                             "payload": "", "payload_size": 0,
                             **{k: row[k] for k in ("src_topic", "src_partition", "src_offset")}})
                self.duplicates += 1
            else:
                seen.add(row["request_id"])
                kept.append(row)
        return kept

    def split(self, events) -> tuple[list[dict], list[dict]]:
        if self.stored is None:
            self.stored = self.sink.stored_offsets(self.settings.topic)
        rows, dead = [], []
        now = time.time()
        cap = self.settings.dlq_payload_bytes
        stored = self._already_stored(events)
        for event in events:
            msg = event.message
            if (msg.partition, msg.offset) in stored:
                self.skipped += 1  # stored before a crash/rebalance: already counted
                continue
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            try:
                results = process_message(event.value, self.bucket, self.settings.max_message_bytes, now)
            except Exception as exc:  # a bug must not turn one event into a stuck partition
                log.exception("derivation failed at %s/%s", msg.partition, msg.offset)
                results = [Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}")]
            for result in results:
                if isinstance(result, Rejection):
                    raw = event.value or b""
                    dead.append({"ts": now, "reason": result.reason, "detail": result.detail,
                                 "payload": base64.b64encode(raw[:cap]).decode(), "payload_size": len(raw),
                                 **source})
                else:
                    result.update(source)
                    rows.append(result)
        return self._drop_duplicates(rows, dead, now), dead

    def mark_stored(self, events) -> None:
        if self.stored is None:
            return
        for event in events:
            msg = event.message
            if msg.offset > self.stored.get(msg.partition, -1):
                self.stored[msg.partition] = msg.offset

    def health(self) -> dict:
        return {
            "status": "paused" if self.sink.paused_reason else "ok",
            "paused_reason": self.sink.paused_reason,
            "consumed": self.consumed, "accepted": self.accepted, "rejected": self.rejected,
            "skipped_redelivered": self.skipped, "duplicates": self.duplicates,
            "store_retries": self.sink.retries,
            "uptime_s": round(time.time() - self.started, 1), "last_batch_at": self.last_batch_at,
            "last_batch": self.last_batch,
        }
