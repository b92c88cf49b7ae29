"""`Meter`: the gateway-side emitter of phasemeter generation events, or of
phase events (start / first_token / end, docs/phases.md) with phase_events=True.

The caller's cost per generation is a few argument checks, one tuple and one
append to a bounded deque under a lock (a few microseconds). JSON encoding and
all Kafka work happen in one background daemon thread (see sender.py), started
on the first event. Kafka trouble never blocks or raises in the caller: the
queue absorbs it, and when full the newest event is dropped and counted.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass

import phasemeter.stream_jobs.reasons as R

from .generation import (BadArgument, Generation, check_duration, check_estimated, check_outcome, check_request,
                         check_stalls, check_t0, check_threshold, encodable)
from phasemeter.stream_jobs.contract import (DEFAULT_STALL_THRESHOLD_S, MAX_DURATION_S, control_character,
                                             has_control)
from .phases import PhaseGeneration, end_item, first_token_item, start_item
from .sender import Sender

log = logging.getLogger("phasemeter.emitter")
_ESTIMATED = (None, None, None, None, True)  # the v2 fields of a record(output_tokens_estimated=True)
_MAX_S = MAX_DURATION_S

# The sender thread has time to spare, so durability wins over latency:
# acks=all (kafka-python's idempotent default) and effectively endless retries,
# bounded by delivery_timeout_ms. Key and value are bytes we encode ourselves.
# Envelopes by default, as OTLP exporters batch: one message per event left
# the worker spending most of its CPU consuming (docs/performance/emitter.md).
DEFAULT_ENVELOPE_SIZE = 100
DEFAULT_PRODUCER_CONFIG = {
    "acks": "all",
    "linger_ms": 5,
    "retries": 2_147_483_647,
    "compression_type": None,
    "key_serializer": None,
    "value_serializer": None,
}


@dataclass(frozen=True, slots=True)
class EmitterStats:
    """Counters of one Meter. enqueued + dropped == attempted events, and
    enqueued == sent + failed + queued (queued includes events handed to the
    producer that are not acknowledged yet). `refused` counts the calls that
    raised BadArgument (a ValueError) instead: never queued, so in neither
    sum; Meter.refusals() has them per reason code.

    An event is one queue item: a generation event, or one phase event. With
    phase events a generation counts two or three times (start, first_token
    if any, end), and each phase is dropped or sent on its own: a dropped
    `end` makes the worker record that generation as abandoned."""

    enqueued: int
    sent: int
    dropped: int
    failed: int
    queued: int
    refused: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"enqueued": self.enqueued, "sent": self.sent, "dropped": self.dropped,
                "failed": self.failed, "queued": self.queued, "refused": self.refused}


class Channel:
    """Bounded queue plus counters. One lock guards both, so a stats snapshot
    never sees an event in two states (or none) while it moves between them.
    The bound covers queued + in-flight events: kafka-python 3 buffers without
    limit, so a stalled broker must fill *our* bound, not the gateway's memory."""

    __slots__ = ("q", "maxlen", "lock", "drained", "closed",
                 "enqueued", "dropped", "in_flight", "sent", "failed", "refusals")

    def __init__(self, maxlen: int) -> None:
        # No deque(maxlen=...): that silently evicts the *oldest* event; we want
        # to refuse the newest and count it.
        self.q: collections.deque = collections.deque()
        self.maxlen = maxlen
        self.lock = threading.Lock()
        self.drained = threading.Condition(self.lock)
        self.closed = False
        self.enqueued = self.dropped = self.in_flight = self.sent = self.failed = 0
        self.refusals: collections.Counter = collections.Counter()  # reason code -> calls refused

    def take(self) -> collections.deque:
        # Swap the whole deque: O(1) under the lock, so a caller arriving
        # meanwhile never waits behind a long pop loop (a contended lock
        # releases the GIL, and getting it back can cost milliseconds).
        with self.lock:
            batch, self.q = self.q, collections.deque()
            self.in_flight += len(batch)
        return batch

    def settle(self, ok: bool, n: int = 1) -> None:
        # Called from our thread and from kafka-python's I/O thread (callbacks).
        with self.lock:
            self.in_flight -= n
            if ok:
                self.sent += n
            else:
                self.failed += n
            if not self.in_flight and not self.q:
                self.drained.notify_all()

    def snapshot(self) -> EmitterStats:
        with self.lock:
            return EmitterStats(self.enqueued, self.sent, self.dropped, self.failed,
                                len(self.q) + self.in_flight, sum(self.refusals.values()))

    def refuse(self, exc: ValueError) -> None:
        with self.lock:
            self.refusals[getattr(exc, "reason", R.BAD_VALUE)] += 1

    def after_fork(self) -> None:
        """In a forked child: a new lock (the parent's may have been held by
        a thread the child does not have), an empty queue (what the parent
        queued is the parent's to send) and counters from zero (the child's
        stats are its own events). A closed Channel stays closed."""
        self.q = collections.deque()
        self.lock = threading.Lock()
        self.drained = threading.Condition(self.lock)
        self.enqueued = self.dropped = self.in_flight = self.sent = self.failed = 0
        self.refusals = collections.Counter()


class Meter:
    """Emits one event per generation to Kafka (schema/event-v1.schema.json),
    or, with `phase_events=True`, phase events (docs/phases.md, schema v2) so
    that a generation that never ends is still seen. `generation(...,
    phase_events=)` overrides the default per call; `start`/`first_token`/
    `end` send phases from separate callbacks. All share one queue and bound.

    `queue_size` bounds events not yet settled (queued plus handed to the
    producer); beyond it new events are dropped and counted. `producer_config`
    is merged over DEFAULT_PRODUCER_CONFIG (it may carry SASL/SSL secrets, so
    it is never logged). `producer_factory(**kwargs)` replaces
    kafka.KafkaProducer, e.g. with a fake in tests. `close()` also runs at
    interpreter exit, bounded by `flush_timeout_s`; after it, events are
    dropped and counted. Events go in envelopes of up to `envelope_size`
    (default 100; producers/envelopes.py) holding what the sender thread
    found queued, so a quiet gateway still sends each event at once. Phase
    events keep the partition their request_id key gives them.
    `envelope_size=1` sends one keyed message per event, for consumers of
    the topic other than phasemeter's worker.
    `stall_threshold_s` (default 0.5 s): a gap between consecutive chunks
    longer than this counts in `gaps_over` (Generation.chunk, docs/metrics.md).
    A Meter made before os.fork() (a pre-fork server's master, at import)
    works in each child: the child starts its own sender thread, its stats
    count its own events from zero, and what the parent had queued is sent
    by the parent alone.
    """

    def __init__(self, bootstrap_servers: str, topic: str = "phasemeter.generations", *,
                 gateway: str | None = None, queue_size: int = 10_000, flush_timeout_s: float = 5.0,
                 producer_config: dict | None = None, producer_factory=None,
                 envelope_size: int = DEFAULT_ENVELOPE_SIZE, phase_events: bool = False,
                 stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError("topic must be a non-empty str")
        if gateway is not None and (not isinstance(gateway, str) or not 0 < len(gateway) <= 200
                                    or not encodable(gateway)):
            raise ValueError("gateway must be a non-empty str of at most 200 characters that UTF-8 can encode")
        if gateway is not None and has_control(gateway):  # the worker's rule (contract.has_control)
            raise ValueError(control_character("gateway", gateway).detail)
        if not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size must be a positive int, got {queue_size!r}")
        if not isinstance(envelope_size, int) or not 1 <= envelope_size <= 2000:
            raise ValueError(f"envelope_size must be an int in 1..2000, got {envelope_size!r}")
        if not isinstance(phase_events, bool):
            raise ValueError(f"phase_events must be a bool, got {phase_events!r}")
        self._stall_s = check_threshold(stall_threshold_s)  # read by Generation.chunk()
        # The class, not the flag: generation() then pays one attribute read.
        self._gen_cls = PhaseGeneration if phase_events else Generation
        if not flush_timeout_s >= 0:
            raise ValueError(f"flush_timeout_s must be >= 0, got {flush_timeout_s!r}")
        kwargs = dict(DEFAULT_PRODUCER_CONFIG, bootstrap_servers=bootstrap_servers)
        kwargs.update(producer_config or {})
        self._flush_timeout_s = float(flush_timeout_s)
        self._ch = Channel(queue_size)
        self._sender = Sender(self._ch, topic, gateway, str(bootstrap_servers), kwargs,
                              producer_factory, on_producer=self._rearm_atexit,
                              envelope_size=envelope_size)
        # A weak reference: an unused Meter may still be garbage collected.
        ref = weakref.ref(self)
        self._atexit_hook = lambda: (m := ref()) is not None and m.close()
        atexit.register(self._atexit_hook)
        _LIVE.add(self)

    @property
    def stall_threshold_s(self) -> float:
        """The gap (s) over which a chunk gap counts in `gaps_over`; integrations
        that time chunks themselves count against it and send it along."""
        return self._stall_s

    # -- hot path ------------------------------------------------------------
    def generation(self, model: str, input_tokens: int, *, request_id: str | None = None,
                   replica: str | None = None, cached_input_tokens: int | None = None,
                   phase_events: bool | None = None) -> Generation:
        """Start timing one generation; see `Generation` for the protocol.
        `phase_events` (None: the Meter's default) makes it a `PhaseGeneration`,
        which sends `start` now and `first_token`/`end` as they happen."""
        cls = self._gen_cls if phase_events is None else (PhaseGeneration if phase_events else Generation)
        try:
            return cls(self, model, input_tokens, request_id, replica, cached_input_tokens)
        except ValueError as exc:
            self._ch.refuse(exc)
            raise

    def record(self, *, model: str, input_tokens: int, output_tokens: int, t0: float,
               ttft_s: float | None = None, e2e_s: float | None = None, queue_s: float | None = None,
               cached_input_tokens: int | None = None, status: str = "ok",
               finish_reason: str | None = None, request_id: str | None = None,
               replica: str | None = None, t_first: float | None = None, t_end: float | None = None,
               t_scheduled: float | None = None, output_tokens_estimated: bool = False,
               chunks: int | None = None, max_gap_s: float | None = None, gaps_over: int | None = None,
               gap_threshold_s: float | None = None) -> None:
        """Emit a generation timed elsewhere. Give durations (ttft_s, e2e_s,
        queue_s) or epoch timestamps (t_first, t_end, t_scheduled) -- not both;
        durations from a monotonic clock are preferable (immune to NTP steps).
        `output_tokens_estimated=True`: output_tokens was counted by the
        caller (chunks), not reported by the server; sent as schema_version 2.

        Decode stalls timed by the caller (docs/metrics.md): `chunks` timed,
        the largest gap between consecutive ones `max_gap_s`, and `gaps_over`,
        how many gaps exceeded `gap_threshold_s` (None: this Meter's
        `stall_threshold_s`, sent whenever gaps_over is). Checked by the
        worker's rules (gaps_over <= chunks, max_gap_s <= e2e_s, ...); the
        event is then schema_version 2. Leave them None when nothing was
        timed per chunk: absent is "unknown", 0 would claim a smooth stream."""
        try:  # free unless it raises (3.11+)
            if not (t0.__class__ is float and t0 - t0 == 0.0 or t0.__class__ is int):  # NaN - NaN is NaN
                check_t0(t0)
            check_request(model, input_tokens, cached_input_tokens, request_id, replica)
            check_outcome(output_tokens, status, finish_reason)
            v2 = None  # the common event: v1, exactly as before
            if output_tokens_estimated is not False:
                check_estimated(output_tokens_estimated)
                v2 = _ESTIMATED
            stalls = chunks is not None or max_gap_s is not None or gaps_over is not None or gap_threshold_s is not None
            if t_end is not None or t_first is not None or t_scheduled is not None:
                if e2e_s is not None or ttft_s is not None or queue_s is not None:
                    raise BadArgument("give durations (ttft_s/e2e_s/queue_s) or timestamps "
                                      "(t_first/t_end/t_scheduled), not both")
                if t_end is None:
                    raise BadArgument("t_end is required when timestamps are given", R.MISSING_FIELD)
                e2e_s = t_end - t0
                ttft_s = None if t_first is None else t_first - t0
                queue_s = None if t_scheduled is None else t_scheduled - t0
                names = ("t_end", "t_first", "t_scheduled")
            elif e2e_s is None:
                raise BadArgument("e2e_s (or t_end) is required", R.MISSING_FIELD)
            else:
                names = ("e2e_s", "ttft_s", "queue_s")
            try:  # the common case inline: three calls cost more than their checks
                ok = 0 <= e2e_s <= _MAX_S and (ttft_s is None or 0 <= ttft_s <= _MAX_S) \
                    and (queue_s is None or 0 <= queue_s <= _MAX_S)
            except (TypeError, ArithmeticError):  # a str; a Decimal NaN signals when compared
                ok = False
            if not ok:  # check_duration holds the rule and says what is wrong
                check_duration(names[0], e2e_s)
                check_duration(names[1], ttft_s)
                check_duration(names[2], queue_s)
            if stalls:  # checked once e2e_s is known (a gap lies inside the generation)
                if gap_threshold_s is None and gaps_over is not None:
                    gap_threshold_s = self._stall_s
                v2 = check_stalls(chunks, max_gap_s, gaps_over, gap_threshold_s, e2e_s) + (
                    True if output_tokens_estimated else None,)
            # EVENT_FIELDS order; request_id None is filled in by the sender thread.
            self._put((request_id, model, t0, ttft_s, e2e_s, queue_s, input_tokens, output_tokens,
                       cached_input_tokens, status, finish_reason, replica, v2))
        except ValueError as exc:  # counted, then the caller's to handle
            self._ch.refuse(exc)
            raise
        except (TypeError, ArithmeticError) as exc:  # a timestamp that is no number: t_end - t0
            bad = BadArgument(f"record(): {exc}", R.WRONG_TYPE)
            self._ch.refuse(bad)
            raise bad from None

    # -- phase events from separate callbacks (docs/phases.md) ----------------
    # Durations (s since t0, from time.monotonic() differences) are preferred
    # over epoch timestamps: an NTP step between phases cannot skew them. Use
    # t_first/t_end only where the gateway has nothing but a wall clock.
    # queue_s and cached_input_tokens go on whichever phase first knows them.
    def start(self, *, model: str, input_tokens: int, t0: float | None = None,
              request_id: str | None = None, cached_input_tokens: int | None = None,
              queue_s: float | None = None, replica: str | None = None) -> str:
        """Send `start` and return the request_id (given, or a new uuid4 hex)
        to pass to `first_token()` and `end()`. t0 defaults to time.time(); a
        caller computing durations should read time.monotonic() alongside."""
        try:
            item = start_item(model, input_tokens, t0, request_id, cached_input_tokens, queue_s, replica)
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)
        return item[1]

    def first_token(self, request_id: str, *, ttft_s: float | None = None, t_first: float | None = None,
                    queue_s: float | None = None, cached_input_tokens: int | None = None) -> None:
        """Send `first_token`: exactly one of ttft_s (s since t0) or t_first (epoch s)."""
        try:
            item = first_token_item(request_id, ttft_s, t_first, queue_s, cached_input_tokens)
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)

    def end(self, request_id: str, *, output_tokens: int, e2e_s: float | None = None,
            t_end: float | None = None, status: str = "ok", finish_reason: str | None = None,
            queue_s: float | None = None, cached_input_tokens: int | None = None,
            output_tokens_estimated: bool = False) -> None:
        """Send `end`: exactly one of e2e_s (s since t0) or t_end (epoch s)."""
        try:
            item = end_item(request_id, output_tokens, e2e_s, t_end, status, finish_reason, queue_s,
                            cached_input_tokens, output_tokens_estimated)
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)

    # -- all or nothing (the OTLP receiver: a request is queued whole, or refused) --
    def batch(self) -> Batch:
        """An empty `Batch`: its record() runs this Meter's record() checks
        (refusals counted here) and holds the events for put_all()."""
        return Batch(self)

    def put_all(self, batch: Batch) -> bool:
        """Enqueue every event of `batch`, or none when they do not all fit in
        the bound (or the Meter is closed): False, and nothing is counted as
        dropped, since the caller still holds them (it answers "retry later")."""
        items, ch = batch.items, self._ch
        with ch.lock:
            q = ch.q
            if ch.closed or len(q) + ch.in_flight + len(items) > ch.maxlen:
                return False
            was_empty = not q
            q.extend(items)
            ch.enqueued += len(items)
        batch.items = []
        if was_empty and items:
            self._sender.wake()
        return True

    def refusals(self) -> collections.Counter:
        """Calls refused (BadArgument), per the worker's reason code."""
        with self._ch.lock:
            return collections.Counter(self._ch.refusals)

    def _put(self, item: tuple) -> None:
        ch = self._ch
        with ch.lock:
            q = ch.q
            if ch.closed or len(q) + ch.in_flight >= ch.maxlen:
                ch.dropped += 1
                return
            was_empty = not q
            q.append(item)
            ch.enqueued += 1
        # The sender only sleeps after finding the queue empty, so only the
        # append that ends emptiness needs to wake it.
        if was_empty:
            self._sender.wake()

    # -- lifecycle -----------------------------------------------------------
    def stats(self) -> EmitterStats:
        return self._ch.snapshot()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every enqueued event is sent or failed; False on timeout."""
        timeout = self._flush_timeout_s if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + timeout
        ch = self._ch
        with ch.lock:
            if not ch.q and not ch.in_flight:
                return True
        self._sender.request_flush(deadline)
        with ch.drained:
            return ch.drained.wait_for(lambda: not ch.q and not ch.in_flight,
                                       max(0.0, deadline - time.monotonic()))

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender thread and close the producer; idempotent.
        Events not delivered within the timeout stay counted as queued."""
        with self._ch.lock:
            if self._ch.closed:
                return
            self._ch.closed = True  # from here on, new events are dropped and counted
        atexit.unregister(self._atexit_hook)
        timeout = self._flush_timeout_s if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + timeout
        try:
            if not self.flush(timeout):
                log.warning("phasemeter emitter: closed with %d events undelivered",
                            self._ch.snapshot().queued)
        finally:
            self._sender.stop(deadline)

    def _rearm_atexit(self) -> None:
        # KafkaProducer registers its own atexit close when built (lazily, so
        # after ours). atexit runs last-registered first; re-registering puts
        # our flush ahead of the producer closing itself.
        if not self._ch.closed:
            atexit.unregister(self._atexit_hook)
            atexit.register(self._atexit_hook)

    def _after_fork(self) -> None:
        self._ch.after_fork()
        self._sender.after_fork()

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# Pre-fork servers (gunicorn, uvicorn --workers) make the Meter at import,
# then fork: the child has none of the parent's threads, and a lock held by
# one of them at the fork stays held forever. Every live Meter is re-made
# in the child (os.register_at_fork, as OpenTelemetry's batch processors
# do); a WeakSet, so the hook keeps no Meter alive, and one hook for all
# (there is no way to unregister one).
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for meter in list(_LIVE):
        meter._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Batch:
    """Events checked one by one, queued together by `Meter.put_all` or not
    at all. `record` and the phase calls ARE Meter's (one set of checks,
    refusals counted by the Meter); they append here instead of to the
    queue."""

    __slots__ = ("_ch", "_stall_s", "items")

    def __init__(self, meter: Meter) -> None:
        self._ch, self._stall_s, self.items = meter._ch, meter._stall_s, []

    record = Meter.record
    start, first_token, end = Meter.start, Meter.first_token, Meter.end

    def _put(self, item: tuple) -> None:
        self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)
