"""Gathering a stream's records into batches for the ingest agent.

Faust's `take_events(max_, within)` counts messages and, after a batch, waits
`within` from the moment the body returns, while intake stands still during
the body: batches began seconds old (docs/performance/worker.md, "Freshness
and batching"). `gather` differs in three ways:

* intake goes on while a batch is processed, into the next batch (up to the
  same bounds, then the stream waits: backpressure, nothing dropped), so the
  CPU Faust spends consuming overlaps the store's insert, which runs without
  the GIL;
* the linger counts from the oldest record's arrival, so a batch whose
  records queued up while the previous one was written goes at once;
* a batch is bounded by bytes as well as messages: one message can be an
  envelope of many generations (producers/envelopes.py), and bytes bound
  what a batch holds in memory.

Acks stay with the caller's design (the agents consume with acks off and
commit durable positions, handoff.py); records of a partition revoked while
they waited are dropped by `resume.admit`, as with Faust's own buffering.
"""

from __future__ import annotations

import asyncio
import time

from . import faust_adapter


async def gather(stream, max_messages: int, max_bytes: int, linger_s: float):
    """Yield lists of Faust events: up to `max_messages` and about
    `max_bytes` (the message that crosses it is the last), or what arrived
    once the oldest has waited `linger_s`."""
    batch: list = []
    size = 0
    oldest: float | None = None  # monotonic arrival of batch[0]
    room, full, arrived = asyncio.Event(), asyncio.Event(), asyncio.Event()
    room.set()

    async def add(value):
        nonlocal size, oldest
        while not room.is_set():  # both batches full: the stream waits
            await stream.wait(room)
            if stream.should_stop:  # never processed: re-read from the durable position
                return value
        event = stream.current_event
        if event is None:
            raise RuntimeError("gather: a value without its event")
        batch.append(event)
        size += len(event.message.value or b"")
        if oldest is None:
            oldest = time.monotonic()
            arrived.set()
        if len(batch) >= max_messages or size >= max_bytes:
            full.set()
            room.clear()
        return value

    acks = stream.enable_acks
    stream.enable_acks = False
    remove = faust_adapter.passive(stream, add)  # as take_events consumes
    try:
        while not stream.should_stop:
            if oldest is None:
                arrived.clear()
                await stream.wait_for_stopped(arrived)
                continue
            wait = oldest + linger_s - time.monotonic()
            if wait > 0 and not full.is_set():
                await stream.wait_for_stopped(full, timeout=wait)
                continue
            out = list(batch)
            batch.clear()
            size, oldest = 0, None
            full.clear()
            room.set()  # intake goes on into the next batch while this one is processed
            yield out
            for event in out:
                await stream.ack(event)
    finally:
        stream.enable_acks = acks
        remove()
