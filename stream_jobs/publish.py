"""What a batch writes to Kafka on its way (phases for the join, dead letters
for people) is acknowledged before the batch records its progress, or the
batch waits.

A producer's flush() returns once every record it holds was delivered or
refused; it does not raise for a refused one (aiokafka), and a record that
does not fit the producer's limits is refused before it is even queued. A
batch that only flushed would record its progress over phases Kafka never
took (a topic whose max.message.bytes is below the worker's, a write the
cluster's ACLs deny): generations lost without a word. So every delivery is
checked, and what was refused is sent again with backoff. The batch, and so
its partitions, waits meanwhile (backpressure: nothing is dropped), and
/health says why. Re-sent phases are harmless: the join takes a phase it
already holds as a duplicate.
"""

from __future__ import annotations

import asyncio
import logging

from phasemeter.settings import redact

from . import faust_adapter

log = logging.getLogger("phasemeter.worker")

Message = tuple[str, "bytes | None", bytes, "int | None"]  # topic, key, value, partition


async def send_batched(app, topic: str, records: list[tuple[bytes, "bytes | None", int]]) -> list:
    """Many small records, (key, value, partition), in aiokafka batches: one
    batch per partition (a new one when it is full) instead of a send each.
    The join writes a changelog record per generation; sent one by one, each
    cost 32 µs of the event loop in a join run, appended ~1-3 µs (docs/performance/
    worker.md). They are the same Kafka records, so Faust replays them as before.
    -> (future, the indexes of the records it holds) per batch: the future
    resolves once Kafka acknowledged the batch, or fails for all of them (a
    partition's batch is written whole or not at all)."""
    producer = faust_adapter.aiokafka_producer(app)
    open_: dict[int, tuple[object, list[int]]] = {}
    sent = []
    for i, (key, value, partition) in enumerate(records):
        entry = open_.get(partition)
        if entry is not None and entry[0].append(key=key, value=value, timestamp=None) is not None:
            entry[1].append(i)
            continue
        if entry is not None:  # full: on its way, and a new one takes the record
            sent.append((await producer.send_batch(entry[0], topic, partition=partition), entry[1]))
        batch = producer.create_batch()
        batch.append(key=key, value=value, timestamp=None)  # an empty batch takes any one record
        open_[partition] = (batch, [i])
    for partition, (batch, held) in open_.items():
        sent.append((await producer.send_batch(batch, topic, partition=partition), held))
    return sent


class Publisher:
    # A refused record costs one produce request to try again, so the wait is
    # capped lower than the store's: the batch resumes within seconds once
    # the cluster takes it.
    def __init__(self, app, max_backoff_s: float = 5.0):
        self.app = app
        self.max_backoff_s = max_backoff_s
        self.paused_reason: str | None = None
        self.retries = 0

    async def _attempt(self, messages: list[Message]) -> list[tuple[Message, BaseException]]:
        """Send all in batches (`send_batched`: a batch's dead letters cost
        ~25 µs each of the event loop sent one by one), wait for every
        acknowledgement; -> the refused ones. A record without a partition
        goes where the producer's partitioner puts its key, as a send would."""
        by_topic: dict[str, list[Message]] = {}
        for message in messages:
            by_topic.setdefault(message[0], []).append(message)
        refused, sent = [], []
        for topic, group in by_topic.items():
            try:
                where: dict = {}
                for _, key, _, partition in group:
                    if partition is None and key not in where:
                        where[key] = await faust_adapter.partition_for_key(self.app, topic, key)
                records = [(key, value, where[key] if partition is None else partition)
                           for _, key, value, partition in group]
                sent += [(group, future, held) for future, held in await send_batched(self.app, topic, records)]
            except Exception as exc:  # refused before it was queued (e.g. an unknown partition)
                refused += [(m, exc) for m in group]
        results = await asyncio.gather(*(f for _, f, _ in sent), return_exceptions=True)
        refused += [(group[i], r) for (group, _, held), r in zip(sent, results) if isinstance(r, BaseException)
                    for i in held]
        return refused

    async def deliver(self, messages: list[Message]) -> None:
        """Return once Kafka acknowledged every message; until then retry what
        it refused, doubling the wait up to `max_backoff_s`."""
        backoff, pending = 0.2, list(messages)
        while pending:
            refused = await self._attempt(pending)
            if not refused:
                break
            pending = [m for m, _ in refused]
            exc = refused[0][1]
            self.retries += 1
            self.paused_reason = (f"Kafka refused {len(pending)} record(s) for {pending[0][0]} "
                                  f"({type(exc).__name__}: {redact(str(exc))[:200]})")
            log.warning("%s; sending again in %.1fs", self.paused_reason, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)
        self.paused_reason = None
