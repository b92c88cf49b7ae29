"""The ingest agent's per-batch work, free of Faust: the agent (ingest_agent.py) is a thin loop over it.

`Pipeline.split` turns an admitted batch (raw, joined and OTLP topics) into rows, dead letters and phases to
forward to the join. It decodes the batch (batch_decode.py, pure), skips what the store already holds (a re-read
after a crash or a rebalance, whose rollup cells it returns for a check) and dead-letters duplicate deliveries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import numpy as np

from phasemeter.settings import Settings

from . import dead_letter, dedup
from . import reasons as R
from .batch_decode import Ahead, Decoded, decode
from .buckets import Bucketer, parse_edges
from .contract import Rejection, oldest_kept
from .ledger import Ask, Stored, offset_spans
from .sequence import Sequencer
from .labels import LabelBound
from .sink import Sink

log = logging.getLogger("phasemeter.worker")
# The counters /health shows from the start, at 0 until a batch counts one (Pipeline.counts).
COUNTED = ("consumed", "accepted", "rejected", "skipped_redelivered", "duplicates", "phases_forwarded",
           "rejoined_dropped", "joined_in_batch", "otlp_spans_ignored")


class Pipeline:
    """State the agent needs between batches, kept out of the Faust closure."""

    def __init__(self, settings: Settings, sink: Sink):
        self.settings = settings
        self.sink = sink
        self.bucket = Bucketer(parse_edges(settings.bucket_edges))
        self.topics = tuple(settings.ingest_topics)
        self.labels = LabelBound(settings.label_top_k)
        self.labels_seeded = False  # the store's label values are read at the first batch (again after a rebalance)
        self.sequencer = Sequencer()
        # (topic, partition) -> highest offset with stored rows or dead letters, read after (re)assignment:
        # a record at or below it may be a re-read of a batch whose progress was never recorded.
        self.stored: dict[tuple[str, int], int] | None = None
        # (topic, partition) -> [records, bytes] seen since this owner resumed. The previous owner's last batch
        # began there and held at most batch_rows records and batch_bytes before its last (batching.gather).
        # A kill can commit that batch's view blocks but not its raw part, so its rows look new: their cells
        # are checked after the write too (docs/delivery.md).
        self.since_resume: dict[tuple[str, int], list[int]] = {}
        # (topic, partition) -> the log's end offset when this owner took the partition (`bound_rereads`).
        # The previous owner had stopped fetching by then, so records from there on need no check. Without
        # it a fresh start on a quiet topic would check every batch for minutes (docs/performance/sink.md).
        self.resume_end: dict[tuple[str, int], int] = {}
        self.reread_records = 0  # of the last split: records _maybe_in_the_previous_batch
        # /health's counters: COUNTED, then those a batch adds as it counts them (batches_decoded_ahead, ...).
        self.counts: Counter = Counter(dict.fromkeys(COUNTED, 0))
        self.started = time.time()
        self.publisher = None  # publish.Publisher, set by the app
        self.last_batch_at: float | None = None
        self.last_batch: dict | None = None
        self.writing_since: float | None = None

    def oldest(self, now: float) -> float:
        """The earliest t0 the store keeps: an older event is dead-lettered (outside_retention), not left to the TTL."""
        return oldest_kept(now, self.settings.raw_ttl_days)

    def forget_offsets(self) -> None:
        """After a rebalance another worker may have stored more rows and label values: re-read them."""
        self.sequencer.forget()
        self.stored = None
        self.labels_seeded = False
        self.since_resume = {}
        self.resume_end = {}

    def bound_rereads(self, ends: dict[tuple[str, int], int]) -> None:
        """End offsets of partitions just taken (ingest_agent.py); one without keeps the batch bounds alone."""
        self.resume_end.update(ends)

    def _already_stored(self, events) -> dict[tuple[str, int], Stored]:
        """What the store holds of this batch's re-read records, per partition (only re-reads cost a query): those
        at or below the store's highest offset, asked about as one span [lo, hi] per partition."""
        if self.stored is None:
            self.stored = {(t, p): o for t in self.topics for p, o in self.sink.stored_max(t).items()}
        rereads = offset_spans((m.topic, m.partition, m.offset) for m in (e.message for e in events)
                               if m.offset <= self.stored.get((m.topic, m.partition), -1))
        return {(t, p): self.sink.stored_in_range(t, p, lo, hi) for (t, p), (lo, hi) in rereads.items()}

    def _duplicates(self, events, d: Decoded, dropped: set, dead: list[dict], now: float):
        """The batch's rows but `dropped` and its duplicates (dedup.py), or []. The store is asked about each
        scope; the decode's answer stands unless it holds any of their request_ids or `dropped` is not empty.
        The request_ids of `dropped` (rows the store held) count as stored whatever the scope's time range: a
        later copy of one in the batch is a duplicate, as it was when the batch was first read."""
        joined = self.settings.joined_topic_name
        scopes = dedup.scopes(d.gens, d.message, d.joined, [e.message.topic for e in events], joined,
                              dropped) if dropped else d.scopes
        held: dict[str, set[str]] = {}  # src_topic -> request_ids of `dropped`
        for i in dropped:
            held.setdefault(events[d.message[i]].message.topic, set()).add(d.gens.request_ids[i])
        asks = [Ask((self.settings.topic, joined) if s.topic == joined else (s.topic,), s.unique, s.lo, s.hi)
                for s in scopes]
        stored = [found.union(*(held.get(t, ()) for t in a.topics))
                  for a, found in zip(asks, self.sink.existing_request_ids(asks))]
        answer = dedup.answer(scopes, stored, joined) if dropped or any(stored) else d.repeats
        self.counts["rejoined_dropped"] += answer.rejoined
        self.counts["duplicates"] += len(answer.letters)
        for row, rid in answer.letters:
            msg = events[d.message[row]].message
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            dead.append(dead_letter.record(R.DUPLICATE, dead_letter.duplicate_detail(rid), None, source, now, 0))
        if answer is d.repeats:
            return d.deduped if len(d.deduped) else []
        dropped = dropped | answer.dropped
        return d.gens.without(dropped) if len(dropped) < len(d.gens) else []

    def _maybe_in_the_previous_batch(self, msg, size: int) -> bool:
        """Whether the previous owner's last batch may have held this record (offset order per partition)."""
        tp = (msg.topic, msg.partition)
        seen = self.since_resume.setdefault(tp, [0, 0])
        inside = (seen[0] < self.settings.batch_rows and seen[1] < self.settings.batch_bytes
                  and msg.offset < self.resume_end.get(tp, msg.offset + 1))
        seen[0] += 1
        seen[1] += size
        self.reread_records += inside
        return inside

    def _decoding(self, now: float) -> dict:
        """batch_decode.decode's settings at this clock."""
        return dict(bucket=self.bucket, max_bytes=self.settings.max_message_bytes, now=now,
                    partitions=self.settings.topic_partitions, oldest=self.oldest(now),
                    internal_topic=self.settings.joined_topic_name, otlp_topic=self.settings.otlp_topic,
                    otlp_model=self.settings.otlp_model, payload_cap=self.settings.dlq_payload_bytes)

    def decode_ahead(self, events) -> Ahead | None:
        """The next batch decoded while this one is written; None if that fails (it is decoded in its turn)."""
        try:
            return Ahead(events, **self._decoding(time.time()))
        except Exception:
            log.exception("the decode ahead failed: the batch is decoded in its turn")
            return None

    def _decode(self, events, now: float) -> Decoded:
        """`decode`, or if it raises, each message decoded alone: one that raises is dead-lettered as
        `internal` and the rest go on. One bad record (a count past 2**53) once stopped every batch it was in."""
        decoding = self._decoding(now)
        try:
            return decode(events, **decoding)
        except Exception:
            log.exception("the batch's decode failed: each message is decoded alone")
            self.counts["batches_decode_failed"] += 1
        broken = {}
        for m, event in enumerate(events):
            try:
                decode([event], **decoding)
            except Exception as exc:
                log.exception("decode failed at %s/%s", event.message.partition, event.message.offset)
                broken[m] = Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}")
        return decode(events, broken=broken, **decoding)

    def split(self, events, ahead: Ahead | None = None):
        """Admitted events -> (rows as columnar.Generations or [], dead letters, phases to forward as
        (partition, timestamp, fields), suspect rollup cells), the rows' labels from outside bounded per model
        (labels.py); sets `reread_records`. `ahead`: the batch decoded early (`decode_ahead`), if it was."""
        self.reread_records = 0
        now = time.time()
        d = ahead.decoded_for(events, self.oldest(now)) if ahead is not None else None
        if d is not None:
            self.counts["batches_decoded_ahead"] += 1
        else:
            d = self._decode(events, now)
        self.counts["otlp_spans_ignored"] += d.otlp_ignored
        self.counts.update(d.notes)
        self.counts["phases_forwarded"] += len(d.forward)
        self.counts["joined_in_batch"] += d.joined_in_batch
        self.counts["phases_duplicate_in_batch"] += d.duplicates
        gens, dead = d.gens, list(d.store_refused)
        cap = self.settings.dlq_payload_bytes
        for (m, r), kept in zip(d.refused, d.payloads):
            msg = events[m].message
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            dead.append(dead_letter.record(r.reason, r.detail, events[m].value, source, now, cap, kept=kept))
        stored = self._already_stored(events)
        again = [self._maybe_in_the_previous_batch(e.message, len(e.value or b"")) for e in events]
        looked = [m for m, e in enumerate(events) if again[m] or (e.message.topic, e.message.partition) in stored]
        # The rows are in their messages' order: each message's rows are a run.
        ends = np.searchsorted(d.message, looked, side="right").tolist()
        suspects, dropped, inside, taken = set(), set(), [], set()
        for m, first, end in zip(looked, np.searchsorted(d.message, looked).tolist(), ends):
            msg = events[m].message
            held = stored.get((msg.topic, msg.partition))
            for i in range(first, end):
                # A row the store holds is skipped, its cell a suspect: its insert may have stopped before the
                # rollup view got its block. It holds one row of a request_id per record, the first copy's: a
                # later one is a duplicate (`_duplicates`). Also skipped, a request_id whose every copy in the
                # record it holds as a duplicate: the check that found them may not see the first from here.
                rid = gens.request_ids[i]
                cell = held.rows.get((msg.offset, rid)) if held and (msg.offset, rid) not in taken else None
                if cell is not None:
                    taken.add((msg.offset, rid))
                    suspects.add(cell)
                    dropped.add(i)
                # The record's copies are counted only where it holds duplicates: not a walk of it per row.
                elif held and held.duplicates and \
                        (n := held.duplicates[msg.offset, dead_letter.duplicate_detail(rid)]) and \
                        n >= gens.request_ids[first:end].count(rid):
                    dropped.add(i)
                elif again[m]:
                    inside.append(i)
        self.counts["skipped_redelivered"] += len(dropped)
        suspects |= gens.cells(inside) if inside else set()
        rows = self._duplicates(events, d, dropped, dead, now)
        kept = [x for x in dead if x["src_offset"] not in
                getattr(stored.get((x["src_topic"], x["src_partition"])), "dead", ())]
        self.counts["skipped_redelivered"] += len(dead) - len(kept)  # dead letters a re-read record stored before
        if not self.labels_seeded:
            self.labels.seed(self.sink.label_values())
            self.labels_seeded = True
        if len(rows):
            self.labels.columns(rows)
        for label, n in self.labels.folded.items():
            self.counts[f"labels_other_{label}"] = n
        return rows, kept, d.forward, suspects

    def health(self) -> dict:
        # Paused by the store, or by Kafka refusing what a batch publishes: either way the batch waits and retries.
        paused = self.sink.paused_reason or getattr(self.publisher, "paused_reason", None)
        return {
            "status": "paused" if paused else "ok",
            "paused_reason": paused,
            "publish_retries": getattr(self.publisher, "retries", 0),
            "store_retries": self.sink.retries, "writing_since": self.writing_since,
            # The store's last error, transient (retried, paused) or deterministic (rows dead-lettered), and its code.
            "store_error": self.sink.store_error, "store_refused": self.sink.store_refused,
            "last_store_refusal": self.sink.last_refusal,
            **dict(self.counts),
            "uptime_s": round(time.time() - self.started, 1), "last_batch_at": self.last_batch_at,
            "last_batch": self.last_batch,
        }
