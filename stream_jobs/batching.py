"""Gathering a stream's records into batches for the ingest agent.

Faust's `take_events` waits its whole `within` after each batch and takes nothing while the body runs: batches
began seconds old (docs/performance/worker.md, "Freshness and batching"). `gather` instead:

* takes records into the next batch while one is processed (up to the same bounds, then the stream waits:
  nothing dropped), so Faust's consuming overlaps the store's insert, which runs without the GIL;
* counts the linger from the oldest record's arrival;
* bounds a batch's memory by bytes too: one message can be an envelope of many generations (producers/envelopes.py).

Acks stay with the caller (handoff.py); `resume.admit` drops records of a partition revoked while they waited.
"""

from __future__ import annotations

import asyncio
import time

from . import faust_adapter


async def gather(stream, max_messages: int, max_bytes: int, linger_s: float):
    """Yield lists of Faust events: up to `max_messages` and about `max_bytes` (the message crossing it is
    the last), or what arrived once the oldest has waited `linger_s`."""
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
            out, batch = batch, []
            size, oldest = 0, None
            full.clear()
            room.set()  # intake goes on into the next batch while this one is processed
            yield out
            for event in out:
                await stream.ack(event)
    finally:
        stream.enable_acks = acks
        remove()
