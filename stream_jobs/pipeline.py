"""The per-batch work of the stream job, kept out of the Faust closure.

`Pipeline.split(events)` turns a batch of Kafka records (from the raw topic
and from the worker's own joined topic), already admitted in offset order by
its `sequencer`, into rows (columns), dead letters and phase events to
forward to the join: it runs the pure derivation on each, skips each row and dead letter
the store already holds (a re-read after a crash or a rebalance) and
returns those rows' rollup cells for a check, and dead-letters duplicate
deliveries. No Faust import here: the agent in app.py is a thin loop over it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import numpy as np

from phasemeter.settings import Settings

from . import batch_join, columnar, columnar_join, dead_letter
from . import reasons as R
from .buckets import Bucketer, parse_edges
from .contract import oldest_kept
from .ledger import Stored, offset_spans
from .sequence import Sequencer
from .derive import Phase, Rejection, process_event
from .fast_decode import process_message_fast
from .join import phase_partition
from .labels import LabelBound
from .otlp_in import process_otlp
from .sink import Sink, columns_of

log = logging.getLogger("phasemeter.worker")


class Pipeline:
    """State the agent needs between batches, kept out of the Faust closure."""

    def __init__(self, settings: Settings, sink: Sink):
        self.settings = settings
        self.sink = sink
        self.bucket = Bucketer(parse_edges(settings.bucket_edges))
        self.topics = tuple(settings.ingest_topics)
        self.otlp_ignored = 0
        self.labels = LabelBound(settings.label_top_k)
        self.labels_seeded = False  # the store's label values are read before the first batch
        self.sequencer = Sequencer()
        # (topic, partition) -> highest offset the store holds rows or dead
        # letters of, read after (re)assignment: records at or below it may
        # be a re-read of a batch whose progress row was never written.
        self.stored: dict[tuple[str, int], int] | None = None
        # (topic, partition) -> [records, bytes] seen since this owner
        # resumed there: the part of the partition the previous owner may
        # have been writing when it stopped. Its last batch began at that
        # position and held at most batch_rows records, and at most
        # batch_bytes before its last record (stream_jobs/batching.gather).
        # A kill can leave that batch's view blocks committed while its raw
        # part is not (each table commits on its own). The raw rows then look
        # new, so the cells they touch are checked after the write too: the
        # re-insert may be counted twice in a tier (another batch shape,
        # another token), or dropped as a duplicate block after a repair
        # removed the orphaned states (the same token).
        self.since_resume: dict[tuple[str, int], list[int]] = {}
        # (topic, partition) -> the log's end offset read once this owner had
        # the partition (`bound_rereads`). The previous owner had stopped
        # fetching by then, so its last batch held only records below it: a
        # record at or past it was produced later and needs no check. Without
        # it (a fresh start on a quiet topic) every batch of the first minutes
        # would be checked, which cost freshness (docs/performance/sink.md).
        self.resume_end: dict[tuple[str, int], int] = {}
        self.reread_records = 0  # of the last split: records _maybe_in_the_previous_batch
        self.counts: Counter = Counter()
        self.consumed = self.skipped = self.accepted = self.rejected = self.duplicates = 0
        self.forwarded = self.rejoined = self.joined_in_batch = 0
        self.started = time.time()
        self.publisher = None  # publish.Publisher, set by the app
        self.last_batch_at: float | None = None
        self.last_batch: dict | None = None
        self.writing_since: float | None = None

    def oldest(self, now: float) -> float:
        """The earliest t0 the store keeps: an older event is dead-lettered
        (outside_retention) instead of stored and deleted by the TTL."""
        return oldest_kept(now, self.settings.raw_ttl_days)

    def forget_offsets(self) -> None:
        """After a rebalance another worker may have stored more: re-read."""
        self.sequencer.forget()
        self.stored = None
        self.labels_seeded = False  # another worker may have kept other values
        self.since_resume = {}
        self.resume_end = {}

    def bound_rereads(self, ends: dict[tuple[str, int], int]) -> None:
        """The end offsets of partitions this owner has just taken, read
        after it was assigned them (stream_jobs/ingest_agent.py). A partition
        without one keeps the batch bounds alone."""
        self.resume_end.update(ends)

    def _rereads(self, events) -> dict[tuple[str, int], tuple[int, int]]:
        """Per partition, the offsets [lo, hi] of this batch's records at or
        below what the store holds there: a re-read after a crash or a rebalance."""
        if self.stored is None:
            self.stored = {(t, p): o for t in self.topics for p, o in self.sink.stored_max(t).items()}
        msgs = [e.message for e in events]
        return offset_spans((m.topic, m.partition, m.offset) for m in msgs
                            if m.offset <= self.stored.get((m.topic, m.partition), -1))

    def _already_stored(self, events) -> dict[tuple[str, int], Stored]:
        """What the store already holds of this batch's re-read records, per
        partition (only re-read records cost a query)."""
        return {(t, p): self.sink.stored_in_range(t, p, lo, hi) for (t, p), (lo, hi) in self._rereads(events).items()}

    def _as_columns(self, events, ahead: columnar.Ahead | None = None):
        """The batch as columns (stream_jobs/columnar.py) when all its records
        are from the raw topic or the join's (whose records are the
        generations it joined) and all its events generations, good or bad:
        the bad ones are dead-lettered with their reasons, and the re-read,
        duplicate and re-joined rows are handled by the row path's rules
        (`_split`, `_duplicates_in_columns`), row for row. Decided before any
        bookkeeping, so the row path can still take the batch whole. The
        OTLP topic has its own decoder."""
        names = (self.settings.topic, self.settings.joined_topic_name)
        if not events or any(e.message.topic not in names for e in events):
            return None
        now = time.time()
        decoded = ahead.rows_for(events, self.oldest(now)) if ahead is not None else None
        if decoded is not None:
            self.counts["batches_decoded_ahead"] += 1
        else:
            decoded = self._columns_or_none(columnar.decode, events, self.bucket, self.settings.max_message_bytes,
                                            now, oldest=self.oldest(now),
                                            internal_topic=self.settings.joined_topic_name,
                                            payload_cap=self.settings.dlq_payload_bytes)
        if decoded is None:
            return None
        gens, ids = decoded.gens, decoded.gens.request_ids
        stored = self._already_stored(events)
        refused: dict[int, list[tuple[Rejection, str]]] = {}  # message -> its refused events and their payloads
        for (m, rejection), kept in zip(decoded.refused, decoded.payloads):
            refused.setdefault(m, []).append((rejection, kept))
        dead, suspects, inside, dropped, message_of = [], set(), [], set(), []
        cap, first = self.settings.dlq_payload_bytes, 0
        for m, (event, n) in enumerate(zip(events, gens.per_message)):
            msg = event.message
            recheck = self._maybe_in_the_previous_batch(msg, len(event.value or b""))
            held = stored.get((msg.topic, msg.partition))
            for i in range(first, first + n) if held is not None or recheck else ():
                if self._stored_before(held, msg.offset, ids[i], suspects):
                    dropped.add(i)
                elif recheck:
                    inside.append(i)
            message_of += [m] * n
            first += n
            if m in refused:
                source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
                dead += [dead_letter.record(r.reason, r.detail, event.value, source, now, cap, kept=kept)
                         for r, kept in refused[m]]
        suspects |= gens.cells(inside) if inside else set()
        dropped |= self._duplicates_in_columns(gens, self._scopes(events, len(gens), message_of, dropped), dead, now)
        return *self._kept(gens, dropped, dead, stored), [], suspects

    def _kept(self, gens: columnar.Generations, dropped: set, dead: list[dict], stored) -> tuple:
        """(the rows but `dropped`, or [] for none; the dead letters but those
        the store holds, skipped as a re-read)."""
        kept = [d for d in dead if d["src_offset"] not in
                getattr(stored.get((d["src_topic"], d["src_partition"])), "dead", ())]
        self.skipped += len(dead) - len(kept)
        if dropped:
            gens = gens.without(dropped) if len(dropped) < len(gens) else []
        return gens if len(gens) else [], kept

    def _scopes(self, events, n: int, message_of: list[int], dropped: set) -> list[tuple[str, range | list[int]]]:
        """A columnar batch's rows left after `dropped`, by their record's topic."""
        topics = {e.message.topic for e in events}
        if len(topics) == 1 and not dropped:  # the common batch, of one topic
            return [(topics.pop(), range(n))]
        return [(topic, [i for i, m in enumerate(message_of) if events[m].message.topic == topic and i not in dropped])
                for topic in (self.settings.joined_topic_name, self.settings.topic) if topic in topics]

    def _duplicates_in_columns(self, gens: columnar.Generations, scopes, dead: list[dict], now: float) -> set[int]:
        """The rows (indexes) to drop as duplicates (`_duplicates_of`), each
        topic's `scopes` in turn: a generation already stored (or earlier in
        the batch) is the gateway's duplicate delivery, dead-lettered (a span
        exported twice too). A joined one (or joined in this batch) is the
        join re-publishing after a crash (docs/phases.md): dropped, counted."""
        out = set()
        for topic, rows in scopes:
            if not len(rows):
                continue
            ts = gens.ts[rows]

            def source(j, rows=rows):
                return {k: gens.columns[k][rows[j]].as_py() for k in ("src_topic", "src_partition", "src_offset")}
            ids = gens.request_ids[rows.start:rows.stop] if type(rows) is range else [gens.request_ids[i] for i in rows]
            out |= {rows[j] for j in self._duplicates_of(self._dup_scope(topic), ids, float(ts.min()), float(ts.max()),
                                                         source, dead, now, topic == self.settings.joined_topic_name)}
        return out

    def _phases_as_columns(self, events):
        """The batch through ingest's join in columns (columnar_join.py) when
        nothing in it needs the row path: all records phases from the raw
        topic, none re-read, every one well-formed, the generations they
        complete new and joined whole. As `_as_columns`, decided before any
        bookkeeping."""
        if any(e.message.topic != self.settings.topic for e in events) or self._rereads(events):
            return None
        now = time.time()
        joined = self._columns_or_none(columnar_join.fold, events, self.bucket, self.settings.max_message_bytes, now,
                                       self.settings.topic_partitions, oldest=self.oldest(now))
        if joined is None or self._stored_ids(self._dup_scope(self.settings.joined_topic_name),
                                              joined.gens.request_ids, *columnar.ts_bounds(joined.gens)):
            return None  # a re-join after a crash: the row path drops it and counts it
        self.forwarded += len(joined.forward)
        self.joined_in_batch += len(joined.gens)
        self.counts["phases_duplicate_in_batch"] += joined.duplicates
        return joined.gens, [], joined.forward, self._recheck(events, joined.gens)

    def _recheck(self, events, gens: columnar.Generations) -> set:
        """The minute cells of the rows from records the previous owner's
        last batch may have held (`_maybe_in_the_previous_batch`, asked once
        of every record, in order)."""
        inside, first = [], 0
        for event, n in zip(events, gens.per_message):
            if self._maybe_in_the_previous_batch(event.message, len(event.value or b"")):
                inside += range(first, first + n)
            first += n
        return gens.cells(inside) if inside else set()

    def _dup_scope(self, topic: str) -> tuple[str, ...]:
        """Where a copy of a row from `topic` may be stored. A joined
        generation is stored from the joined topic (the join agent) or from
        the raw one (joined in ingest's batch, batch_join.py); after a crash
        the same generation may come back by the other way."""
        if topic == self.settings.joined_topic_name:
            return self.settings.topic, topic
        return (topic,)

    def _stored_ids(self, topics: tuple[str, ...], ids: list[str], lo: float, hi: float) -> set[str]:
        """Which of `ids` the store holds on `topics` within the time range of
        their rows (`lo`..`hi`), widened by 2 ms for the store's ts, which is
        the row's rounded to the millisecond."""
        return self.sink.existing_request_ids(topics, ids, lo - 0.002, hi + 0.002)

    def _duplicates_of(self, topics: tuple[str, ...], ids: list[str], lo: float, hi: float, source, dead: list[dict],
                       now: float, rejoin: bool) -> set[int]:
        """The places in `ids` (request_ids of rows from `topics`, in the
        batch's order, their ts within `lo`..`hi`) of the rows already
        stored or earlier in the batch: each dead-lettered (`source(i)`: its
        record) as the gateway's duplicate, or, `rejoin`, counted."""
        unique = list(dict.fromkeys(ids))
        seen = self._stored_ids(topics, unique, lo, hi)
        if not seen and len(unique) == len(ids):
            return set()
        out = set()
        for i, rid in enumerate(ids):
            if rid not in seen:
                seen.add(rid)
                continue
            out.add(i)
            if rejoin:
                self.rejoined += 1
                continue
            dead.append(dead_letter.record(R.DUPLICATE, f"request_id {rid[:128]} already stored", None, source(i),
                                           now, 0))
            self.duplicates += 1
        return out

    def _stored_before(self, held: Stored | None, offset: int, request_id: str, suspects: set) -> bool:
        """Whether the store holds this row of a re-read record (stored before
        a crash or a rebalance): it is skipped, and its cell handed over for
        a check, as its insert may have stopped before the rollup view got
        its block."""
        cell = held.rows.get((offset, request_id)) if held is not None else None
        if cell is None:
            return False
        suspects.add(cell)
        self.skipped += 1
        return True

    def _maybe_in_the_previous_batch(self, msg, size: int) -> bool:
        """Whether the previous owner's last batch may have held this record
        (records come in offset order per partition, from where this owner
        resumed)."""
        tp = (msg.topic, msg.partition)
        seen = self.since_resume.setdefault(tp, [0, 0])
        inside = (seen[0] < self.settings.batch_rows and seen[1] < self.settings.batch_bytes
                  and msg.offset < self.resume_end.get(tp, msg.offset + 1))
        seen[0] += 1
        seen[1] += size
        self.reread_records += inside
        return inside

    def decode_ahead(self, events) -> columnar.Ahead | None:
        """The next batch's columns, decoded while this one is written."""
        now = time.time()
        return self._columns_or_none(columnar.Ahead, events, self.bucket, self.settings.max_message_bytes, now,
                                     self.oldest(now), self.settings.joined_topic_name,
                                     self.settings.dlq_payload_bytes)

    def _columns_or_none(self, decoder, *args, **kwargs):
        """A pure decoder of the columns' path (it runs before any bookkeeping),
        or None when it fails: the batch then takes the row path, which
        answers message by message and dead-letters one that fails there as
        `internal`. A bug on the columns must not stop every batch that
        meets the same records, as one did: a count past 2**53 raised out of
        the split of its whole batch."""
        try:
            return decoder(*args, **kwargs)
        except Exception:
            log.exception("the columns' decoder failed: the batch takes the row path")
            self.counts["batches_columns_failed"] += 1
            return None

    def split(self, events, ahead: columnar.Ahead | None = None):
        """`_split`, with the labels from outside bounded per model (labels.py)."""
        out = self._split(events, ahead)
        if not self.labels_seeded:
            self.labels.seed(self.sink.label_values())
            self.labels_seeded = True
        if len(out[0]):
            self.labels.columns(out[0])
        for label, n in self.labels.folded.items():
            self.counts[f"labels_other_{label}"] = n
        return out

    def _split(self, events, ahead: columnar.Ahead | None = None):
        """Admitted events -> (rows, dead letters, phases to forward as
        (partition, timestamp, fields), suspect rollup cells). The rows are
        columns (columnar.Generations), or [] when there are none.
        `reread_records` then says how many of
        its records the previous owner's last batch may have held. `ahead`:
        the batch decoded before its turn (`decode_ahead`), if it was."""
        self.reread_records = 0
        fast = self._as_columns(events, ahead) or self._phases_as_columns(events)
        if fast is not None:
            return fast
        dead, phases = [], []
        # The rows, and whether their record may be in the previous owner's
        # batch, by the scope their duplicates are checked in, in its order
        # (`_duplicates_in_columns`): the joined topic's, then each other's.
        scoped = {t: ([], []) for t in (self.settings.joined_topic_name, *self.topics)}
        enveloped = []  # (phase, source, recheck) of phases that came in envelopes: _join_in_batch
        suspects: set = set()
        now = time.time()
        oldest = self.oldest(now)
        cap = self.settings.dlq_payload_bytes
        stored = self._already_stored(events)
        for event in events:
            msg = event.message
            recheck = self._maybe_in_the_previous_batch(msg, len(event.value or b""))
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            try:
                if msg.topic == self.settings.otlp_topic:
                    results, ignored, notes = process_otlp(event.value, self.bucket,
                                                           self.settings.max_message_bytes, now,
                                                           self.settings.otlp_model, oldest)
                    self.otlp_ignored += ignored
                    self.counts.update(notes)
                else:
                    results = process_message_fast(event.value, self.bucket, self.settings.max_message_bytes, now,
                                                   internal=msg.topic != self.settings.topic, oldest=oldest)
            except Exception as exc:  # a bug must not turn one event into a stuck partition
                log.exception("derivation failed at %s/%s", msg.partition, msg.offset)
                results = [Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}")]
            held = stored.get((msg.topic, msg.partition))
            refused = [r for r in results if isinstance(r, Rejection)]
            if refused:  # redacted: no value of a field outside the contract (dead_letter.py)
                kept = dead_letter.payloads(event.value, cap, [r.event for r in refused],
                                            parse=msg.topic != self.settings.otlp_topic)
                dead += [dead_letter.record(r.reason, r.detail, event.value, source, now, cap, kept=k)
                         for r, k in zip(refused, kept)]
            for result in results:
                if isinstance(result, Rejection):
                    continue
                if isinstance(result, Phase):
                    # Partitioned by request_id, so all phases of a generation
                    # meet in one partition of the join, whatever the gateway
                    # keyed. The gateway's timestamp travels along: the join's clock.
                    phase = (phase_partition(result.request_id, self.settings.topic_partitions),
                             batch_join.message_time(msg, now), result.fields)
                    # Only phases that came in envelopes are joined in the batch:
                    # with one message per phase, ingest's own loop is the bottleneck,
                    # and the inserts the batch join adds to it cost more than the
                    # hops it saves (docs/performance/worker.md).
                    if len(results) > 1:
                        enveloped.append((phase, source, recheck))
                    else:
                        phases.append(phase)
                elif not self._stored_before(held, msg.offset, result["request_id"], suspects):
                    result.update(source)
                    rows, again = scoped[msg.topic]  # every ingest topic has its scope
                    rows.append(result)
                    again.append(recheck)
        joined, joined_again, forward = self._join_in_batch(enveloped, stored, suspects, now)
        scoped[self.settings.joined_topic_name][0].extend(joined)
        scoped[self.settings.joined_topic_name][1].extend(joined_again)
        phases += forward
        self.forwarded += len(phases)
        gens, scopes, inside, refused = self._rows_as_columns(scoped, now)
        suspects |= gens.cells(inside) if inside else set()
        dropped = self._duplicates_in_columns(gens, scopes, dead, now)
        return *self._kept(gens, dropped, dead + refused, stored), phases, suspects

    def _rows_as_columns(self, scoped: dict[str, tuple[list[dict], list[bool]]], now: float):
        """The row path's rows as columns, built once, in their scopes' order:
        -> (columns, each scope's rows, the indexes of the rows whose cells are
        checked, the dead letters of rows Arrow cannot take, sink.columns_of)."""
        gens, refused = columns_of([r for rows, _ in scoped.values() for r in rows], now)
        again = [a for _, flags in scoped.values() for a in flags]
        sizes = [len(rows) for rows, _ in scoped.values()]
        if refused:
            ends = np.cumsum(sizes)
            for k, _ in refused:
                sizes[int(np.searchsorted(ends, k, side="right"))] -= 1
            gone = {k for k, _ in refused}
            again = [a for k, a in enumerate(again) if k not in gone]
        starts = np.cumsum([0] + sizes).tolist()
        scopes = [(topic, range(starts[j], starts[j + 1])) for j, topic in enumerate(scoped)]
        return gens, scopes, [k for k, a in enumerate(again) if a] if any(again) else [], [d for _, d in refused]

    def _join_in_batch(self, enveloped, stored, suspects: set, now: float):
        """The rows of the generations that the phases of this batch's
        envelopes complete (batch_join.py), each from the record of the phase
        that completed it, with the re-read rule every row follows, and
        whether that record may be in the previous owner's batch; and the
        phases and notes still to forward to the join agent."""
        if not enveloped:
            return [], [], []

        oldest = self.oldest(now)

        def derive(event: dict) -> dict | None:
            row = process_event(event, self.bucket, now, internal=True, oldest=oldest)
            return None if isinstance(row, Rejection) else row
        folded = batch_join.fold([phase for phase, _, _ in enveloped], derive)
        joined, again = [], []
        for row, i in folded.rows:
            _, source, recheck = enveloped[i]
            held = stored.get((source["src_topic"], source["src_partition"]))
            if self._stored_before(held, source["src_offset"], row["request_id"], suspects):
                continue
            row.update(source)
            joined.append(row)
            again.append(recheck)
        self.joined_in_batch += len(folded.rows)
        self.counts["phases_duplicate_in_batch"] += folded.duplicates
        return joined, again, folded.forward

    def health(self) -> dict:
        # The store, or Kafka refusing what a batch publishes: either way the
        # batch waits and retries.
        paused = self.sink.paused_reason or getattr(self.publisher, "paused_reason", None)
        return {
            "status": "paused" if paused else "ok",
            "paused_reason": paused,
            "publish_retries": getattr(self.publisher, "retries", 0),
            "consumed": self.consumed, "accepted": self.accepted, "rejected": self.rejected,
            "skipped_redelivered": self.skipped, "duplicates": self.duplicates,
            "phases_forwarded": self.forwarded, "rejoined_dropped": self.rejoined,
            "joined_in_batch": self.joined_in_batch,
            "otlp_spans_ignored": self.otlp_ignored,
            "store_retries": self.sink.retries, "writing_since": self.writing_since,
            # The error the store gave last, transient (retried, paused) or
            # deterministic (the rows isolated and dead-lettered), and its code.
            "store_error": self.sink.store_error, "store_refused": self.sink.store_refused,
            "last_store_refusal": self.sink.last_refusal,
            **dict(self.counts),
            "uptime_s": round(time.time() - self.started, 1), "last_batch_at": self.last_batch_at,
            "last_batch": self.last_batch,
        }
