"""The per-batch work of the stream job, kept out of the Faust closure.

`Pipeline.split(events)` turns a batch of Kafka records (from the raw topic
and from the worker's own joined topic) into rows, dead letters and phase
events to forward to the join: it skips records already stored
(exactly-once after a crash or a rebalance), runs the pure derivation on
each, and dead-letters duplicate deliveries. No Faust import here: the agent
in app.py is a thin loop over it.
"""

from __future__ import annotations

import base64
import logging
import time

from phasemeter.settings import Settings

from . import reasons as R
from .buckets import Bucketer, parse_edges
from .derive import Phase, Rejection, process_message
from .join import phase_partition
from .sink import Sink

log = logging.getLogger("phasemeter.worker")


def _timestamp(msg, now: float) -> float:
    ts = getattr(msg, "timestamp", None)
    return ts if isinstance(ts, (int, float)) and ts > 0 else now


class Pipeline:
    """State the agent needs between batches, kept out of the Faust closure."""

    def __init__(self, settings: Settings, sink: Sink):
        self.settings = settings
        self.sink = sink
        self.bucket = Bucketer(parse_edges(settings.bucket_edges))
        self.topics = (settings.topic, settings.joined_topic_name)
        # (topic, partition) -> highest stored offset, and the exact stored
        # offsets at/below it where a batch asked for them.
        self.stored: dict[tuple[str, int], int] | None = None
        self.exact: dict[tuple[str, int], set[int]] = {}
        self.consumed = self.skipped = self.accepted = self.rejected = self.duplicates = 0
        self.forwarded = self.rejoined = 0
        self.started = time.time()
        self.last_batch_at: float | None = None
        self.last_batch: dict | None = None

    def forget_offsets(self) -> None:
        """After a rebalance another worker may have stored more: re-read."""
        self.stored = None
        self.exact = {}

    def _already_stored(self, events) -> set[tuple[str, int, int]]:
        """(topic, partition, offset) of re-delivered records that are in the store.

        Records above a partition's stored maximum are new. At or below it, the
        first batch after (re)assignment asks the store which exact offsets it
        holds, so a batch that was only partly stored is completed, not skipped.
        """
        lows: dict[tuple[str, int], int] = {}
        for event in events:
            tp, o = (event.message.topic, event.message.partition), event.message.offset
            if o <= self.stored.get(tp, -1) and tp not in self.exact:
                lows[tp] = min(lows.get(tp, o), o)
        for (t, p), lo in lows.items():
            self.exact[t, p] = self.sink.stored_in_range(t, p, lo, self.stored[t, p])
        out = set()
        for e in events:
            tp, o = (e.message.topic, e.message.partition), e.message.offset
            if o <= self.stored.get(tp, -1) and o in self.exact.get(tp, ()):
                out.add((*tp, o))
        return out

    def _drop_duplicates(self, rows: list[dict], dead: list[dict], now: float) -> list[dict]:
        """A generation whose request_id is already stored (or earlier in this
        batch) is a duplicate delivery from the gateway: dead-letter it. On
        the joined topic it is the join re-publishing after a crash
        (at-least-once by design, docs/phases.md): drop it and count it."""
        kept = []
        for topic in self.topics:
            kept += self._drop_duplicates_of(topic, [r for r in rows if r["src_topic"] == topic], dead, now)
        return kept

    def _drop_duplicates_of(self, topic: str, rows: list[dict], dead: list[dict], now: float) -> list[dict]:
        if not rows:
            return rows
        ts = [r["ts"] for r in rows]
        ids = list({r["request_id"] for r in rows})
        seen = self.sink.existing_request_ids(topic, ids, min(ts) - 0.002, max(ts) + 0.002)
        kept = []
        for row in rows:
            if row["request_id"] in seen and topic != self.settings.topic:
                self.rejoined += 1
            elif row["request_id"] in seen:
                dead.append({"ts": now, "reason": R.DUPLICATE,
                             "detail": f"request_id {row['request_id'][:128]} already stored",
                             "payload": "", "payload_size": 0,
                             **{k: row[k] for k in ("src_topic", "src_partition", "src_offset")}})
                self.duplicates += 1
            else:
                seen.add(row["request_id"])
                kept.append(row)
        return kept

    def split(self, events) -> tuple[list[dict], list[dict], list[tuple[int, float, dict]]]:
        """-> (rows, dead letters, phases to forward as (partition, timestamp, fields))."""
        if self.stored is None:
            self.stored = {(t, p): o for t in self.topics for p, o in self.sink.stored_offsets(t).items()}
        rows, dead, phases = [], [], []
        now = time.time()
        cap = self.settings.dlq_payload_bytes
        stored = self._already_stored(events)
        for event in events:
            msg = event.message
            if (msg.topic, msg.partition, msg.offset) in stored:
                self.skipped += 1  # stored before a crash/rebalance: already counted
                continue
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            try:
                results = process_message(event.value, self.bucket, self.settings.max_message_bytes, now,
                                          internal=msg.topic != self.settings.topic)
            except Exception as exc:  # a bug must not turn one event into a stuck partition
                log.exception("derivation failed at %s/%s", msg.partition, msg.offset)
                results = [Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}")]
            for result in results:
                if isinstance(result, Rejection):
                    raw = event.value or b""
                    dead.append({"ts": now, "reason": result.reason, "detail": result.detail,
                                 "payload": base64.b64encode(raw[:cap]).decode(), "payload_size": len(raw),
                                 **source})
                elif isinstance(result, Phase):
                    # Partitioned by request_id, so all phases of a generation
                    # meet in one partition of the join, whatever the gateway
                    # keyed. The gateway's timestamp travels along: the join's clock.
                    phases.append((phase_partition(result.request_id, self.settings.topic_partitions),
                                   _timestamp(msg, now), result.fields))
                else:
                    result.update(source)
                    rows.append(result)
        self.forwarded += len(phases)
        return self._drop_duplicates(rows, dead, now), dead, phases

    def mark_stored(self, events) -> None:
        if self.stored is None:
            return
        for event in events:
            msg = event.message
            tp = (msg.topic, msg.partition)
            if msg.offset > self.stored.get(tp, -1):
                self.stored[tp] = msg.offset

    def health(self) -> dict:
        return {
            "status": "paused" if self.sink.paused_reason else "ok",
            "paused_reason": self.sink.paused_reason,
            "consumed": self.consumed, "accepted": self.accepted, "rejected": self.rejected,
            "skipped_redelivered": self.skipped, "duplicates": self.duplicates,
            "phases_forwarded": self.forwarded, "rejoined_dropped": self.rejoined,
            "store_retries": self.sink.retries,
            "uptime_s": round(time.time() - self.started, 1), "last_batch_at": self.last_batch_at,
            "last_batch": self.last_batch,
        }
