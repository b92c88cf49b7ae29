"""The one place the worker reaches into Faust, mode and aiokafka internals.

`REQUIRED` lists every internal used here and in faust_patches.py. `check()` runs as the app is built, so an
upgrade that renamed one fails at start, naming it, not mid-batch. tests/unit/stream_jobs/test_faust_adapter.py
runs it against the pinned versions and checks that no other module names their privates.
"""

from __future__ import annotations

import inspect

import aiohttp.web
import aiokafka
import mode
import mode.worker
from faust.app.base import App
from faust.assignor import PartitionAssignor
from faust.streams import Stream
from faust.tables import TableManager
from faust.tables.base import Collection
from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer, ThreadDelegateConsumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.web.drivers.aiohttp import Web

from . import faust_patches

# (owner, attribute): every internal relied on, and every method overridden or replaced on an instance.
REQUIRED = (
    (mode.Service, "_stopped"),                   # faust_patches.inline_first
    (mode.Service, "_crashed"),                   # faust_patches.inline_first
    (mode.Service, "wait_first"),                 # replaced: faust_patches.inline_first
    (Consumer, "callback"),                       # replaced: faust_patches.after_drop
    (Consumer, "on_buffer_full"),                 # replaced: faust_patches.after_drop
    (Consumer, "on_buffer_drop"),                 # replaced: faust_patches.after_drop
    (Consumer, "_buffered_partitions"),           # faust_patches.after_drop
    (Consumer, "_read_offset"),                   # replaced: deliver_everything
    (Consumer, "_committed_offset"),              # committed_offsets
    (Consumer, "_commit_offsets"),                # commit_offsets
    (faust_aiokafka.Producer, "_ensure_producer"),  # aiokafka_producer
    (aiokafka.AIOKafkaProducer, "create_batch"),  # publish.send_batched, on aiokafka_producer
    (aiokafka.AIOKafkaProducer, "send_batch"),    # publish.send_batched, on aiokafka_producer
    (aiokafka.AIOKafkaProducer, "partitions_for"),  # partition_for_key
    (aiokafka.AIOKafkaProducer, "_partition"),    # partition_for_key
    (ThreadDelegateConsumer, "_thread"),          # install
    (faust_aiokafka.AIOKafkaConsumerThread, "on_thread_stop"),  # replaced: faust_patches.close_consumer_safely
    (faust_aiokafka.Producer, "flush"),           # replaced: faust_patches.bound_producer_stop
    (faust_aiokafka.Producer, "on_stop"),         # replaced: faust_patches.bound_producer_stop
    (Stream, "_enable_passive"),                  # passive
    (Stream, "_processors"),                      # passive
    (Web, "_runner"),                             # set_keepalive
    (aiohttp.web.AppRunner, "_kwargs"),           # set_keepalive
    (TableManager, "on_start"),                   # overridden: faust_patches.TableManager
    (TableManager, "_update_channels"),           # faust_patches.TableManager
    (mode.worker.Worker, "_sentinel_task"),       # overridden: faust_patches.Worker
    # Public but undocumented, read elsewhere in the worker: listed so that a rename fails the check too.
    (App, "rebalancing"), (App, "in_recovery"), (App, "unassigned"), (TableManager, "recovery"),  # ready.py
    (Recovery, "completed"), (Recovery, "in_recovery"), (Recovery, "active_remaining"),  # ready, recovery_task
    (Recovery, "active_offsets"), (Recovery, "active_highwaters"),  # recovery_task.py
    (PartitionAssignor, "assigned_actives"), (Collection, "data"),  # join_agent.py
    (Consumer, "highwater"), (Consumer, "highwaters"), (Consumer, "earliest_offsets"),  # resume, log_offsets
    (Stream, "current_event"), (Stream, "enable_acks"),  # batching.py
)


def _has(owner, name: str) -> bool:
    """A class attribute, or an instance attribute a class in the MRO annotates or assigns in its source."""
    if hasattr(owner, name):
        return True
    for klass in owner.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if f"self.{name} =" in source or f"self.{name}:" in source:
            return True
    return False


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
    faust_patches.bound_producer_stop(app, stop_grace_s)
    consumer = app.consumer
    consumer._read_offset = _NoReadOffset()  # see _NoReadOffset
    # No hooks for these, but instance attributes work: the fetch loop looks up `wait_first` per record and
    # binds `callback` as it starts; the conductor looks up `on_buffer_full`/`_drop` per partition assigned.
    consumer.wait_first = faust_patches.inline_first(consumer, consumer.suspend_flow)
    consumer.callback = faust_patches.after_drop(consumer, consumer.callback)
    # `ThreadDelegateConsumer._thread` (faust/transport/consumer.py): the thread has no public handle.
    faust_patches.close_consumer_safely(consumer._thread)


def committed_offsets(app) -> dict:
    """{Faust TP: the group's committed offset}, as Faust read it after assignment; Faust has no getter."""
    return app.consumer._committed_offset


async def commit_offsets(app, offsets: dict) -> None:
    """Commit `offsets` ({Faust TP: offset}) for partitions still assigned. Faust's `commit()` commits what
    its streams acked; the worker consumes with acks off and commits durable positions (handoff.py)."""
    await app.consumer._commit_offsets(offsets)


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
