"""The adapter's overrides of Faust's, mode's and aiokafka's behaviour; faust_adapter.REQUIRED lists the
internals they use. An upgrade that changes the code an override replaces fails test_faust_patches.py.
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

# Enough for the call_soon callbacks of a closing transport (a few loop turns), far below mode's 1 s.
STOP_GRACE_S = 0.1


class _Continued:
    """The rest of a coroutine that yielded `pending`, run by a new runner (a task) whose sends and throws
    it passes on, as `yield from` would."""

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
    """-> a `wait_first` for `service` that runs its first coroutine inline while none of `flags`,
    `stopped` or `crashed` is set. Faust's fetch loop awaits `wait_first(callback(message), ...)` per
    record, and mode's makes four tasks each time: a third of bare Faust's cost (docs/performance/worker.md)."""
    general = service.wait_first  # the bound method of the class
    # Private in mode (mode/services.py): its public `should_stop` does not test `crashed`.
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
    """-> `deliver` (the consumer's callback), first waiting while the record's partition is held. Faust holds
    a partition (stops fetching it) at 4/5 of its stream buffer until it drains to 2/5, but still delivers what
    it fetched, one put per freed slot. The wait is the delivery's own, so a rebalance or a stop abandons it like
    a put. It polls every `poll_s` (Faust forgets its holds on a restart); a hold older than `max_wait_s` is
    left to Faust's own wait."""
    dropped = asyncio.Event()
    held_since: dict = {}  # tp -> monotonic time Faust held it

    async def deliver_after_drop(message):
        tp = message.tp
        # No public getter (faust/transport/consumer.py); read anew, as Faust replaces the set on a reset.
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
    """aiokafka's `Fetcher.close` awaits the fetches it cancels without catching their CancelledError
    (aiokafka/consumer/fetcher.py). With the broker unreachable one is always pending, so Faust's `on_thread_stop`
    raised it, mode never set its shutdown flag, and the worker hung 60 s (mode's `shutdown_timeout`) after
    SIGTERM. That CancelledError now ends the close; a cancelled stop still raises."""
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

    Faust's `App.on_stop` flushes the producer before it stops the agents, and with the broker down aiokafka
    gives a batch up only after `producer_request_timeout` (1200 s): a worker was still flushing 60 s after
    SIGTERM. The worker awaits each record it sends before it records progress (publish.py, join_agent.py), so
    the flush is skipped and the producer's close gets what is left of the grace (handoff.py). Records still
    unacknowledged belong to work that recorded no progress, and are sent again when it is re-read."""
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
        # Faust's on_start without its first `await self.sleep(1.0)`; a table declared late still raises.
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class Worker(faust.Worker):
    async def _sentinel_task(self) -> None:
        # mode's `_shutdown_loop` runs this (a 1 s sleep) before closing the loop; by then our last task is
        # cancelled and the consumer, producer and store are closed.
        await asyncio.sleep(STOP_GRACE_S)
