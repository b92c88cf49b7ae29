"""The adapter's overrides of Faust's, mode's and aiokafka's behaviour
(faust_adapter.py holds REQUIRED, every internal both rely on, checked
against the versions constraints.txt pins). An upgrade that changes the
code an override replaces fails test_faust_patches.py. Why each exists, and
what the public API lacks, is said where it is.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time

import faust
from faust.tables import TableManager as _FaustTableManager
from mode.services import WaitResults

log = logging.getLogger("phasemeter.worker")

# Long enough for the callbacks a closing transport schedules with call_soon
# (a few loop iterations), far below mode's 1 s.
STOP_GRACE_S = 0.1


class _Continued:
    """The rest of a coroutine that has yielded `pending` to its runner, to
    be run by a new one (a task), passing on what the task sends or throws,
    as `yield from` would."""

    def __init__(self, coro, pending):
        self.coro, self.pending = coro, pending

    def __await__(self):
        coro, pending = self.coro, self.pending
        while True:
            try:
                try:
                    sent = yield pending
                except BaseException as exc:  # thrown in by the task, e.g. its cancellation
                    pending = coro.throw(exc)
                else:
                    pending = coro.send(sent)
            except StopIteration as done:  # raised by `coro` only: a StopIteration thrown in goes to it
                return done.value


def inline_first(service, *flags):
    """-> a `wait_first` for `service` that runs its first coroutine inline
    while none of `flags`, `stopped` or `crashed` is set.

    Faust's fetch loop hands each record to its stream with
    `await consumer.wait_first(callback(message), suspend_flow.wait())`
    (faust/transport/consumer.py), and mode's `wait_first` makes four tasks a
    record, a third of bare Faust's cost per record (docs/performance/worker.md)."""
    general = service.wait_first  # the bound method of the class
    # mode's Service keeps both events private (mode/services.py) and offers
    # only `should_stop`, which is not the same test: `crashed` is separate.
    flags = (service._stopped, service._crashed, *flags)

    async def wait_first(*coros, timeout=None):
        if (not all(inspect.iscoroutine(c) for c in coros)
                or any(flag.is_set() for flag in flags)):
            return await general(*coros, timeout=timeout)
        first, rest = coros[0], coros[1:]
        try:
            pending = first.send(None)
        except BaseException as exc:
            for other in rest:  # never started: closed, so no "never awaited" warning
                other.close()
            if isinstance(exc, StopIteration):
                return WaitResults([first], [exc.value], False)
            raise
        return await general(_Continued(first, pending), *rest, timeout=timeout)

    return wait_first


def after_drop(consumer, deliver, poll_s: float = 0.05, max_wait_s: float = 2.0):
    """-> `deliver` (the consumer's callback) that first waits while its
    record's partition is held for a full stream buffer.

    Faust holds a partition at 4/5 of its buffer (`Consumer.on_buffer_full`)
    and fetches it again at 2/5 (`on_buffer_drop`), but still delivers what
    it fetched, one put per freed slot. The wait is the delivery's own, so a
    rebalance or a stop abandons it as it abandons a put. It looks again every
    `poll_s` (Faust forgets its holds on a restart), and a hold older than
    `max_wait_s` no longer stops a record: Faust's own wait then applies."""
    dropped = asyncio.Event()
    held_since: dict = {}  # tp -> monotonic time Faust held it

    async def deliver_after_drop(message):
        tp = message.tp
        # Faust's set of held partitions has no public getter
        # (faust/transport/consumer.py); read anew each time, as Faust
        # replaces the set when it resets its state.
        while tp in consumer._buffered_partitions:
            left = held_since.get(tp, 0.0) + max_wait_s - time.monotonic()
            if left <= 0:
                break
            dropped.clear()
            try:
                await asyncio.wait_for(dropped.wait(), min(poll_s, left))
            except asyncio.TimeoutError:
                pass
        return await deliver(message)

    def on_buffer_full(tp, _faust=consumer.on_buffer_full) -> None:
        fresh = tp not in consumer._buffered_partitions
        _faust(tp)
        if fresh:
            held_since[tp] = time.monotonic()

    def on_buffer_drop(tp, _faust=consumer.on_buffer_drop) -> None:
        _faust(tp)
        held_since.pop(tp, None)
        dropped.set()

    consumer.on_buffer_full = on_buffer_full
    consumer.on_buffer_drop = on_buffer_drop
    return deliver_after_drop


def close_consumer_safely(thread) -> None:
    """aiokafka's `Fetcher.close` cancels its pending fetch tasks and awaits
    them without catching their CancelledError (aiokafka/consumer/fetcher.py,
    `close`). A fetch is pending whenever the broker is unreachable (it waits
    out its retry backoff), so the consumer's stop raises CancelledError out
    of Faust's `on_thread_stop`; mode's `ServiceThread._shutdown_thread` then
    never sets the shutdown flag the main loop waits on, and the worker hung
    for mode's `shutdown_timeout` (60 s) after SIGTERM. Here that one
    CancelledError, not a cancellation of the stop itself, ends the close."""
    faust_stop = thread.on_thread_stop

    async def on_thread_stop() -> None:
        try:
            await faust_stop()
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # the stop itself is cancelled
                raise
            log.warning("stopping: the Kafka consumer closed with a fetch still pending (broker unreachable)")

    thread.on_thread_stop = on_thread_stop


def bound_producer_stop(app, grace_s: float) -> None:
    """A stop no longer waits on records a broker does not acknowledge.

    Faust's `App.on_stop` flushes the producer before its agents and timers
    are stopped (faust/app/base.py, `_producer_flush`), and the producer's
    stop closes aiokafka's, which waits for every batch it holds; with the
    broker down aiokafka gives a batch up only after the request timeout
    (Faust's `producer_request_timeout`, 1200 s by default). Measured: a
    worker whose join expiry was writing to a stopped broker was still in
    that flush 60 s after SIGTERM, its agents never told to stop. The worker
    awaits every record it sends before it records progress (publish.py,
    join_agent.py) and sends nothing through Faust's buffer, so the flush at
    stop is skipped: the work in hand waits for its own records within its
    grace (handoff.py). The producer's close gets what is left of the grace;
    records still unacknowledged then belong to work that recorded no
    progress, and are sent again when it is re-read."""
    producer = app.producer
    faust_flush, faust_on_stop = producer.flush, producer.on_stop
    began: list[float] = []

    async def flush() -> None:
        if not app.should_stop:
            await faust_flush()
        elif not began:
            began.append(time.monotonic())

    async def on_stop() -> None:
        left = grace_s - (time.monotonic() - began[0]) if began else grace_s
        try:
            await asyncio.wait_for(faust_on_stop(), max(left, 0.1))
        except asyncio.TimeoutError:
            log.warning("stopping: Kafka has not acknowledged every record sent; closed without them "
                        "(their work recorded no progress: it is re-read and sends them again)")

    producer.flush, producer.on_stop = flush, on_stop


class TableManager(_FaustTableManager):
    """Named by `create_app` (Faust's `TableManager` setting)."""

    async def on_start(self) -> None:
        # Faust's on_start, without its first `await self.sleep(1.0)`: a
        # table declared late still raises (Faust's own check).
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class Worker(faust.Worker):
    async def _sentinel_task(self) -> None:
        # mode's Worker._shutdown_loop runs this (`asyncio.sleep(1.0)`) before
        # it closes the loop; our last task is cancelled on shutdown and the
        # consumer, producer and store are closed by then.
        await asyncio.sleep(STOP_GRACE_S)
