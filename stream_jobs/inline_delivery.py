"""Handing each fetched record to its stream without four asyncio tasks.

Faust's fetch loop delivers every record with
`await consumer.wait_first(callback(message), suspend_flow.wait())`, so that a
delivery blocked on a full stream buffer is abandoned when a rebalance
suspends the flow or the consumer stops. `mode`'s `wait_first` makes a task of
each of the two plus one for `stopped` and one for `crashed`, waits on them
all and cancels the losers: measured, 63 µs a record against 0.2 µs for the
delivery itself, about a third of bare Faust's whole cost per record on the
same machine (BENCHMARKS.md section 18). A phase-protocol generation is three
records, so the join paid it three times a generation.

The delivery almost never waits: it puts the event on a stream's queue and
returns. `install` runs it inline first; only if it suspends (the buffer is
full: backpressure) or the consumer is already suspended, stopping or
crashed does the call go on through `mode`'s `wait_first`, with the
partly-run delivery continuing in its task exactly where it stopped. Either
way the result, the exceptions and the abandoning are those of `wait_first`.
"""

from __future__ import annotations

import inspect

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


def install(app) -> None:
    """Before the consumer starts. Its fetch loop looks `wait_first` up on
    each record, so an attribute of the instance takes the class's place."""
    consumer = app.consumer
    consumer.wait_first = inline_first(consumer, consumer.suspend_flow)
