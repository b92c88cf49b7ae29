"""What a batch writes to Kafka (phases for the join, dead letters for people) is acknowledged before the
batch records its progress; until then the batch waits and sends again what was refused (docs/delivery.md).

aiokafka's flush() does not raise for a refused record, so a batch that only flushed would record progress over
phases Kafka never took (a lower max.message.bytes, an ACL denial), silently losing generations. A phase sent
twice is harmless: the join takes it as a duplicate.
"""

from __future__ import annotations

import asyncio
import logging

from phasemeter.settings import redact

from . import faust_adapter

log = logging.getLogger("phasemeter.worker")

Message = tuple[str, "bytes | None", bytes, "int | None"]  # topic, key, value, partition


async def send_batched(app, topic: str, records: list[tuple[bytes, "bytes | None", int]]) -> list:
    """Many small records, (key, value, partition), in aiokafka batches: one per partition (a new one when
    full), not a send each. A join changelog record sent alone cost 32 µs of the event loop, appended ~1-3 µs
    (docs/performance/worker.md); Kafka gets the same records, so Faust replays them as before. -> (future,
    indexes of its records) per batch: a partition's batch is written whole or not at all."""
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
    # A retry costs one produce request, so the backoff is capped below the store's: a batch resumes in seconds.
    def __init__(self, app, max_backoff_s: float = 5.0):
        self.app = app
        self.max_backoff_s = max_backoff_s
        self.paused_reason: str | None = None
        self.retries = 0

    async def _attempt(self, messages: list[Message]) -> list[tuple[Message, BaseException]]:
        """Send all in batches (sent one by one, dead letters cost ~25 µs each of the event loop) and await
        every acknowledgement; -> the refused ones. A record without a partition goes where `send` would put it."""
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
        """Return once Kafka acknowledged every message; retry refusals, doubling the wait up to `max_backoff_s`."""
        backoff, pending = 0.2, messages
        while refused := await self._attempt(pending):
            pending = [m for m, _ in refused]
            exc = refused[0][1]
            self.retries += 1
            self.paused_reason = (f"Kafka refused {len(pending)} record(s) for {pending[0][0]} "
                                  f"({type(exc).__name__}: {redact(str(exc))[:200]})")
            log.warning("%s; sending again in %.1fs", self.paused_reason, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)
        self.paused_reason = None
