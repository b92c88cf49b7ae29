"""The one background thread that talks to Kafka (what it sends: delivery.py).

Gateway threads only append a tuple to `Channel.q` (channel.py).
Everything slow -- JSON encoding, building the KafkaProducer, network I/O --
happens in `Sender`'s daemon thread, so a slow or absent broker costs the
gateway queue space (then dropped events), never latency or exceptions.
"""

from __future__ import annotations

import logging
import threading
import time

from .delivery import _GEN_LEN, Delivery  # noqa: F401  (_GEN_LEN: tests read it here)

log = logging.getLogger("phasemeter.emitter")

_IDLE_WAIT_S = 1.0  # idle wake-up; only a safety net, callers set the event
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.1, 5.0
_WARN_EVERY_S = 30.0
_JOIN_GRACE_S = 1.0  # producer.close() itself needs a moment after the flush deadline


def _disarm(producer) -> None:
    """A forked child's copy of the parent's KafkaProducer, made inert.
    kafka-python closes every producer at interpreter exit (an atexit hook
    registered when it is built) and in __del__. In the child that close
    waited forever on the batch-list lock when the fork had landed while the
    parent's sender thread was inside send(): a worker of a pre-fork server
    then hung at its exit. Dropping the hook and marking the copy closed
    (what close() itself checks first) keeps the child from touching it; the
    parent's producer is a different object, untouched. kafka-python has no
    public way to forget a producer; test_emitter_fork holds these names to
    the pinned version. A producer of another kind (a `producer_factory`'s)
    is the caller's to handle."""
    from kafka import KafkaProducer  # imported already: the parent built one

    if isinstance(producer, KafkaProducer):
        producer._unregister_cleanup()
        producer._closed = True


class Throttled:
    """At most one warning per interval; counts what it swallowed."""

    def __init__(self, every_s: float = _WARN_EVERY_S) -> None:
        self._every, self._next, self._suppressed = every_s, float("-inf"), 0
        self._lock = threading.Lock()

    def warning(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._suppressed += 1
                return
            self._next, n, self._suppressed = now + self._every, self._suppressed, 0
        if n:
            msg, args = msg + " (%d similar warnings suppressed)", args + (n,)
        log.warning(msg, *args)


def next_backoff(backoff_s: float) -> float:
    return min(backoff_s * 2.0, _BACKOFF_MAX_S)


class Sender(Delivery):
    """Owns the KafkaProducer and the daemon thread; started on first wake()."""

    def __init__(self, channel, topic: str, gateway: str | None, bootstrap: str,
                 producer_kwargs: dict, producer_factory, on_producer=None, envelope_size: int = 1) -> None:
        self._ch, self._topic, self._gateway, self._bootstrap = channel, topic, gateway, bootstrap
        self._kwargs, self._factory, self._on_producer = producer_kwargs, producer_factory, on_producer
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._wake, self._stop = threading.Event(), threading.Event()
        self._stop_deadline = 0.0
        self._flush_deadline: float | None = None  # guarded by channel.lock
        self._producer = None
        self._envelope_size = envelope_size
        self.warn = Throttled()
        self._inherited: list = []  # producers made before a fork, by an ancestor process

    def after_fork(self) -> None:
        """In a forked child: no thread yet (the parent's does not exist
        here; the first event starts one) and no producer. The parent's
        producer is kept but never used: its I/O thread and its sockets are
        the parent's. Nor may it be closed here: a close flushes batches no
        thread here sends, under locks the parent's threads may have held at
        the fork, and those stay held in the child forever."""
        if self._producer is not None:
            _disarm(self._producer)
            self._inherited.append(self._producer)
        self._producer, self._thread, self._flush_deadline = None, None, None
        self._start_lock = threading.Lock()
        stopped = self._stop.is_set()  # a closed Meter stays closed
        self._wake, self._stop = threading.Event(), threading.Event()
        if stopped:
            self._stop.set()
        self.warn = Throttled()

    # -- caller side -------------------------------------------------------
    def wake(self) -> None:
        if self._thread is None:
            self._start()
        if not self._wake.is_set():  # Event.set() takes a lock; skip it when already set
            self._wake.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                t = threading.Thread(target=self._run, name="phasemeter-emitter", daemon=True)
                t.start()
                self._thread = t

    def request_flush(self, deadline: float) -> None:
        with self._ch.lock:
            d = self._flush_deadline
            self._flush_deadline = deadline if d is None else max(d, deadline)
        self.wake()

    def stop(self, deadline: float) -> None:
        """Stop the thread; it closes the producer with what is left until deadline."""
        self._stop_deadline = deadline
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            # A thread stuck in KafkaProducer() (bootstrap timeout) is a daemon:
            # we stop waiting for it rather than hold up shutdown.
            grace = _JOIN_GRACE_S if self._producer is not None else 0.0
            t.join(max(0.0, deadline - time.monotonic()) + grace)

    # -- sender thread -----------------------------------------------------
    def _run(self) -> None:
        ch, backoff = self._ch, _BACKOFF_MIN_S
        while not self._stop.is_set():
            try:
                if self._producer is None:
                    if self._connect():
                        backoff = _BACKOFF_MIN_S
                    else:  # the bounded queue absorbs (then drops) meanwhile
                        self._stop.wait(backoff)
                        backoff = next_backoff(backoff)
                    continue
                batch = ch.take() if ch.q else None
                if batch:
                    self._send(batch)
                    continue
                with ch.lock:
                    flush_deadline, self._flush_deadline = self._flush_deadline, None
                if flush_deadline is not None:
                    self._flush_producer(flush_deadline)
                    continue
                self._wake.clear()
                # Re-check after clear(): an append that raced with clear() has
                # either set the event again or is visible in the queue now.
                if not ch.q and self._flush_deadline is None:
                    self._wake.wait(_IDLE_WAIT_S)
            except Exception as exc:  # a bug here must not kill delivery for good
                self.warn.warning("phasemeter emitter: unexpected %s in sender loop", type(exc).__name__)
                self._stop.wait(_BACKOFF_MIN_S)
        self._close_producer()

    def _connect(self) -> bool:
        try:
            factory = self._factory
            if factory is None:
                # Imported here so `import phasemeter.producers` stays cheap.
                from kafka import KafkaProducer as factory
            producer = factory(**self._kwargs)
        except Exception as exc:
            # Class name only: messages can echo producer_config (credentials).
            self.warn.warning("phasemeter emitter: cannot create Kafka producer for %s (%s); "
                              "retrying with backoff, events queue up to the bound and then drop",
                              self._bootstrap, type(exc).__name__)
            return False
        self._producer = producer
        if self._on_producer is not None:
            self._on_producer()
        return True

    def _flush_producer(self, deadline: float) -> None:
        # Forces out batches held back by linger_ms; the flush() caller decides
        # success from the counters, so a timeout here is not an error.
        remaining = deadline - time.monotonic()
        if remaining > 0:
            try:
                self._producer.flush(timeout=remaining)
            except Exception:
                pass

    def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.close(timeout=max(0.0, self._stop_deadline - time.monotonic()))
        except Exception as exc:  # kafka-python raises if its own flush times out
            self.warn.warning("phasemeter emitter: producer close failed (%s)", type(exc).__name__)
