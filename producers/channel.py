"""The hand-off between the caller's threads and the sender thread: a
bounded queue and the counters of what became of each event.

One lock guards both, so a stats snapshot never sees an event in two states
(or none) while it moves between them.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import phasemeter.stream_jobs.reasons as R


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
