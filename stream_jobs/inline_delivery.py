"""Handing each fetched record to its stream without four asyncio tasks.

Faust's fetch loop delivers every record with
`await consumer.wait_first(callback(message), suspend_flow.wait())`, so that a
delivery blocked on a full stream buffer is abandoned when a rebalance
suspends the flow or the consumer stops. `mode`'s `wait_first` makes a task of
each of the two plus one for `stopped` and one for `crashed`, waits on them
all and cancels the losers: measured, 63 µs a record against 0.2 µs for the
delivery itself, about a third of bare Faust's whole cost per record on the
same machine (docs/performance/worker.md). A phase-protocol generation is three
records, so the join paid it three times a generation.

The delivery almost never waits: it puts the event on a stream's queue and
returns. `install` runs it inline first; only if it suspends (the buffer is
full: backpressure) or the consumer is already suspended, stopping or
crashed does the call go on through `mode`'s `wait_first`, with the
partly-run delivery continuing in its task exactly where it stopped. Either
way the result, the exceptions and the abandoning are those of `wait_first`.

`after_drop` keeps deliveries from reaching a buffer that Faust has already
marked full: a record of a held partition waits for the buffer's drop, once,
instead of waking the fetch loop for each slot freed (docs/performance/worker.md).
"""

from __future__ import annotations

import asyncio
import inspect
import time

from mode.services import WaitResults


class _Continued:
    """The rest of a coroutine that has yielded `pending` to its runner, to
    be run by a new one (a task): an awaitable that passes what the task
    sends or throws on to the coroutine, as `yield from` would."""

    def __init__(self, coro, pending):
        self.coro, self.pending = coro, pending

    def __await__(self):
        coro, pending = self.coro, self.pending
        while True:
            try:
                sent = yield pending
            except BaseException as exc:  # thrown in by the task, e.g. its cancellation
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as done:
                    return done.value


def inline_first(service, *flags):
    """-> a `wait_first` for `service` that runs its first coroutine inline
    while none of `flags` (events whose `wait()` the call is also given),
    `stopped` or `crashed` is set."""
    general = service.wait_first  # the bound method of the class
    flags = (service._stopped, service._crashed, *flags)  # noqa: SLF001 -- mode's own events

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

    Faust holds a partition when its stream's buffer reaches 4/5 full
    (`Consumer.on_buffer_full`) and fetches it again at 2/5
    (`on_buffer_drop`), but it still delivers the records already fetched,
    one by one, into the buffer's last fifth, and then into a full buffer:
    each of those puts waits for one free slot, so every record the stream
    takes wakes the fetch loop again through mode's `wait_first` (four
    tasks). On a backlog of one event per message that ping-pong set the
    pace (docs/performance/worker.md). Waiting here for the drop instead costs
    one wait per fill, and the next ~1,600 records go inline.

    The wait is the delivery's own, so a rebalance or a stop abandons it as
    it abandons a put. It looks again every `poll_s`, in case Faust forgets
    the hold without a drop (its state is reset on a restart), and a hold
    older than `max_wait_s` (a batch held up by the store, a hold Faust left
    behind) no longer stops a record: the delivery is then Faust's own, and
    a full buffer makes it wait exactly as before."""
    dropped = asyncio.Event()
    held_since: dict = {}  # tp -> monotonic time Faust held it

    async def deliver_after_drop(message):
        tp = message.tp
        # Read anew each time: Faust replaces the set when it resets its state.
        while tp in consumer._buffered_partitions:  # noqa: SLF001 -- Faust's own hold
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
        fresh = tp not in consumer._buffered_partitions  # noqa: SLF001
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


def install(app) -> None:
    """Before the consumer starts. Its fetch loop looks `wait_first` up on
    each record and its `callback` once as it starts, and the conductor
    `on_buffer_full` and `on_buffer_drop` once per partition it is
    assigned, so attributes of the instance take the class's place."""
    consumer = app.consumer
    consumer.wait_first = inline_first(consumer, consumer.suspend_flow)
    consumer.callback = after_drop(consumer, consumer.callback)
