"""The one place the worker reaches into Faust, mode and aiokafka internals.

`REQUIRED` lists every internal used here. `check()` runs as the app is built, so an upgrade that renamed one
fails at start, naming it, not mid-batch. tests/unit/stream_jobs/test_faust_adapter.py runs it against the pinned
versions and checks that no other module names their privates; test_faust_adapter_overrides.py fails when an
upgrade changes the code an override replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import dis
import inspect
import logging
import time
import types

import aiohttp.web
import aiokafka
import faust
import mode
import mode.worker
from faust.app.base import App
from faust.assignor import PartitionAssignor
from faust.streams import Stream
from faust.tables import TableManager as _FaustTableManager
from faust.tables.base import Collection
from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer, ThreadDelegateConsumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.web.drivers.aiohttp import Web
from mode.services import WaitResults

log = logging.getLogger("phasemeter.worker")

# (owner, attribute): every internal relied on, and every method overridden or replaced on an instance.
REQUIRED = (
    (mode.Service, "_stopped"),                   # inline_first
    (mode.Service, "_crashed"),                   # inline_first
    (mode.Service, "wait_first"),                 # replaced: inline_first
    (Consumer, "callback"),                       # replaced: after_drop
    (Consumer, "on_buffer_full"),                 # replaced: after_drop
    (Consumer, "on_buffer_drop"),                 # replaced: after_drop
    (Consumer, "_buffered_partitions"),           # after_drop
    (Consumer, "_read_offset"),                   # replaced: _NoReadOffset
    (Consumer, "_committed_offset"),              # committed_offsets
    (Consumer, "_commit_offsets"),                # commit_offsets
    (Consumer, "_on_partitions_revoked"),         # replaced: settle_before_leaving
    (App, "_on_partitions_revoked"),              # settle_before_leaving
    (App, "_on_rebalance_when_stopped"),          # settle_before_leaving
    (faust_aiokafka.Producer, "_ensure_producer"),  # aiokafka_producer
    (aiokafka.AIOKafkaProducer, "create_batch"),  # publish.send_batched, on aiokafka_producer
    (aiokafka.AIOKafkaProducer, "send_batch"),    # publish.send_batched, on aiokafka_producer
    (aiokafka.AIOKafkaProducer, "partitions_for"),  # partition_for_key
    (aiokafka.AIOKafkaProducer, "_partition"),    # partition_for_key
    (ThreadDelegateConsumer, "_thread"),          # install
    (faust_aiokafka.AIOKafkaConsumerThread, "on_thread_stop"),  # replaced: close_consumer_safely
    (faust_aiokafka.Producer, "flush"),           # replaced: bound_producer_stop
    (faust_aiokafka.Producer, "on_stop"),         # replaced: bound_producer_stop
    (Stream, "_enable_passive"),                  # passive
    (Stream, "_processors"),                      # passive
    (Web, "_runner"),                             # set_keepalive
    (aiohttp.web.AppRunner, "_kwargs"),           # set_keepalive
    (_FaustTableManager, "on_start"),             # overridden: TableManager
    (_FaustTableManager, "_update_channels"),     # TableManager
    (mode.worker.Worker, "_sentinel_task"),       # overridden: Worker
    # Public but undocumented, read elsewhere in the worker: listed so that a rename fails the check too.
    (App, "rebalancing"), (App, "in_recovery"), (App, "unassigned"), (_FaustTableManager, "recovery"),  # ready.py
    (Recovery, "completed"), (Recovery, "in_recovery"), (Recovery, "active_remaining"),  # ready, recovery_task
    (Recovery, "active_offsets"), (Recovery, "active_highwaters"),  # recovery_task.py
    (PartitionAssignor, "assigned_actives"), (Collection, "data"),  # join_agent.py
    (Consumer, "highwater"), (Consumer, "highwaters"), (Consumer, "earliest_offsets"),  # resume, log_offsets
    (Stream, "current_event"), (Stream, "enable_acks"),  # batching.py
)


def _has(owner, name: str) -> bool:
    """A class attribute, or an instance attribute a class in the MRO annotates or assigns (`self.<name> = ...`)."""
    if hasattr(owner, name):
        return True
    return any(name in getattr(klass, "__annotations__", {}) or _assigns(klass, name) for klass in owner.__mro__)


def _assigns(klass, name: str) -> bool:
    """Whether a function of `klass` stores `self.<name>`, read from its bytecode: reading the classes' source with
    inspect.getsource took 0.13 CPU s of every worker's start, this 2 ms."""
    return any(_stores(func.__code__, name) for value in vars(klass).values() for func in _functions(value))


def _functions(value) -> list:
    """The functions a class attribute holds, told by its real type only: an attribute lookup, or isinstance (which
    reads `__class__`), on any other object could run its code (a proxy)."""
    if issubclass(type(value), (staticmethod, classmethod)):
        value = value.__func__
    found = [value.fget, value.fset] if issubclass(type(value), property) else [value]
    out = []
    while found:
        func = found.pop()
        if type(func) is types.FunctionType:
            out.append(func)
            found.append(func.__dict__.get("__wrapped__"))  # functools.wraps: the decorated function
    return out


def _stores(code: types.CodeType, name: str) -> bool:
    if name in code.co_names:
        loaded = None  # the local loaded last: `self` right before the store
        for op in dis.get_instructions(code):
            if op.opname == "STORE_ATTR" and op.argval == name and loaded == "self":
                return True
            # A closure's `self` is a cell (LOAD_DEREF); 3.13 may load two locals in one op (LOAD_FAST_LOAD_FAST).
            local = op.opname.startswith("LOAD_FAST") or op.opname == "LOAD_DEREF"
            loaded = (op.argval if isinstance(op.argval, str) else op.argval[-1]) if local else None
    return any(_stores(const, name) for const in code.co_consts if isinstance(const, types.CodeType))


def missing() -> list[str]:
    return [f"{owner.__module__}.{owner.__qualname__}.{name}" for owner, name in REQUIRED if not _has(owner, name)]


def check() -> None:
    if gone := missing():
        raise RuntimeError("the installed Faust/mode/aiokafka no longer has what the worker relies on "
                           f"(stream_jobs/faust_adapter.py): {', '.join(gone)}")


class _NoReadOffset(dict):
    """Replaces Faust's per-partition read offset, which drops records below it and commits a jump above it as
    acked: after a seek back, prefetched records pushed it past the re-fetched ones, silently dropped, and the
    partition stalled. The sequencer (sequence.py) does this job; Faust has no setting. Writes are ignored."""

    def __getitem__(self, key):
        return None

    def __setitem__(self, key, value):
        pass

    def update(self, *args, **kwargs):
        pass


def install(app, stop_grace_s: float) -> None:
    """Before the consumer starts: its fetch loop binds these once."""
    check()
    bound_producer_stop(app, stop_grace_s)
    consumer = app.consumer
    consumer._read_offset = _NoReadOffset()  # see _NoReadOffset
    # No hooks for these, but instance attributes work: the fetch loop looks up `wait_first` per record and
    # binds `callback` as it starts; the conductor looks up `on_buffer_full`/`_drop` per partition assigned.
    consumer.wait_first = inline_first(consumer, consumer.suspend_flow)
    consumer.callback = after_drop(consumer, consumer.callback)
    # `ThreadDelegateConsumer._thread` (faust/transport/consumer.py): the thread has no public handle.
    close_consumer_safely(consumer._thread)


def committed_offsets(app) -> dict:
    """{Faust TP: the group's committed offset}, as Faust read it after assignment; Faust has no getter."""
    return app.consumer._committed_offset


async def commit_offsets(app, offsets: dict) -> dict:
    """Commit `offsets` ({Faust TP: offset}) -> those the group did not take. Faust's `commit()` commits what
    its streams acked; the worker consumes with acks off and commits durable positions (handoff.py). Faust's
    `_commit_offsets` discards the offsets of partitions no longer assigned (logged at info only) and returns
    False when nothing was committed, so its answer alone cannot name what was left."""
    assigned = app.consumer.assignment()
    done = await app.consumer._commit_offsets(offsets)
    return {tp: o for tp, o in offsets.items() if not done or tp not in assigned}


def settle_before_leaving(app, settle) -> None:
    """Run `settle` (the hand-offs' wait for the batch in hand and its commit) when a rebalance reaches a
    stopping worker, before Faust's revoke callback goes on. That callback (`App._on_partitions_revoked`)
    skips its signal once a stop has begun and closes the consumer, which leaves the group at once: the
    partitions moved while a batch was in hand, its commit was then discarded, and the next owner re-read
    what had been stored (docs/delivery.md). The consumer holds the callback from its creation; no hook."""
    consumer = app.consumer
    revoke = consumer._on_partitions_revoked

    async def on_partitions_revoked(revoked) -> None:
        if app.should_stop:
            log.warning("stopping: a rebalance began; the work in hand ends and is committed before this member "
                        "leaves the group")
            await settle()
        await revoke(revoked)

    consumer._on_partitions_revoked = on_partitions_revoked


def aiokafka_producer(app):
    """The aiokafka producer under Faust's, for the batch API Faust lacks (publish.send_batched)."""
    return app.producer._ensure_producer()


async def partition_for_key(app, topic: str, key: bytes | None) -> int:
    """The partition aiokafka's `send` would give `key` on `topic`, for a record sent in a batch
    (publish.send_batched), which must name one. `_partition` is that step of `send` alone."""
    producer = aiokafka_producer(app)
    await producer.partitions_for(topic)
    return producer._partition(topic, None, key, None, key, None)


def passive(stream, processor):
    """Consume `stream` as Faust's `take_events` does (faust/streams.py): `processor` sees every value.
    -> a function removing it. Faust has only `add_processor`: no public passive start, nor removal."""
    stream.add_processor(processor)
    stream._enable_passive(aiter(stream.channel))
    return lambda: stream._processors.remove(processor)


def set_keepalive(app, seconds: float) -> None:
    """Faust has no keepalive setting; its aiohttp AppRunner passes `_kwargs` to the protocol it makes at start."""
    app.web._runner._kwargs["keepalive_timeout"] = seconds


# The overrides `install` and `create_app` put in place, each replacing a piece of Faust's, mode's or
# aiokafka's behaviour.

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
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(dropped.wait(), min(poll_s, left))
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
