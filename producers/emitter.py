"""`Meter`: the gateway-side emitter of phasemeter generation events, or of
phase events (start / first_token / end, docs/phases.md) with phase_events=True.

The caller's cost per generation is a few argument checks, one tuple and one
append to a bounded deque under a lock (a few microseconds). JSON encoding and
all Kafka work happen in one background daemon thread (see sender.py), started
on the first event. Kafka trouble never blocks or raises in the caller: the
queue absorbs it, and when full the newest event is dropped and counted.

Here: the Meter's arguments, its generations and the queueing of events.
The emitting calls and their checks are in calls.py, the queue and its
counters in channel.py, flush/close/fork in lifecycle.py.
"""

from __future__ import annotations

from .calls import Batch, Calls
from .channel import Channel, EmitterStats
from .checks import encodable
from .generation import Generation
from .lifecycle import Lifecycle
from .optional import check_threshold
from phasemeter.stream_jobs.contract import DEFAULT_STALL_THRESHOLD_S, control_character, has_control
from .phases import PhaseGeneration
from .sender import Sender

__all__ = ["Meter", "Batch", "Channel", "EmitterStats", "DEFAULT_ENVELOPE_SIZE", "DEFAULT_PRODUCER_CONFIG"]

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


class Meter(Calls, Lifecycle):
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
        self._arm()

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
