"""Packing encoded events into envelopes: many events per Kafka message.

Kafka's per-message cost, in the producer and above all in the worker's
consumer, dominates a small event: one event per message leaves the worker
spending most of its CPU on consuming (docs/performance/emitter.md). An
envelope `{"schema_version": N, "kind": "batch", "events": [...]}` carries
what the sender found queued, up to `size` events and `max_bytes`; it adds no
wait (a quiet gateway sends envelopes of one).

Phase events keep the partition their own key would give them: they are
grouped by murmur2(request_id), as Kafka's default partitioner (Java's and
kafka-python's) maps a key, and each group goes to that partition. So the
phases of one request stay in one partition, in order, exactly as with one
keyed message each. Generation events have no such need and go unkeyed.
Pure (no I/O): its one Kafka import is the client's partitioner function, murmur2, so
an envelope's key lands where kafka-python would send it; unit-tested on its own.
"""

from __future__ import annotations

from kafka.partitioner.default import murmur2

# Under the worker's default PHASEMETER_MAX_MESSAGE_BYTES (1,000,000) and
# kafka-python's max_request_size (1 MiB) with room to spare: an envelope
# over either would be refused whole. A typical event is ~350 bytes, so a
# full envelope of 100 is ~35 KB and never meets this bound.
ENVELOPE_MAX_BYTES = 256_000
_HEAD = {False: b'{"schema_version":1,"kind":"batch","events":[',
         True: b'{"schema_version":2,"kind":"batch","events":['}
_TAIL = b"]}"
_OVERHEAD = len(_HEAD[True]) + len(_TAIL)


def partition_of(key: bytes, partitions: list[int]) -> int:
    """The partition Kafka's default partitioner picks for `key`."""
    return partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]


def pack(entries: list[tuple[bytes, bool, bytes | None]], size: int, partitions: list[int] | None,
         max_bytes: int = ENVELOPE_MAX_BYTES):
    """(value, is_v2, key to keep or None) per event, in queue order ->
    (partition or None, envelope body, events in it), each group's order kept.

    An envelope holding any v2 event is schema_version 2; one of v1 events
    only stays v1, so workers from before v2 keep reading it. `partitions`
    (sorted) is needed only when some entry has a key to keep."""
    groups: dict[int | None, list[tuple[bytes, bool]]] = {}
    for value, v2, key in entries:
        target = None if key is None else partition_of(key, partitions)
        groups.setdefault(target, []).append((value, v2))
    for target, items in groups.items():
        chunk: list[bytes] = []
        chunk_v2, used = False, _OVERHEAD
        for value, v2 in items:
            if chunk and (len(chunk) >= size or used + len(value) + 1 > max_bytes):
                yield target, _HEAD[chunk_v2] + b",".join(chunk) + _TAIL, len(chunk)
                chunk, chunk_v2, used = [], False, _OVERHEAD
            chunk.append(value)
            chunk_v2 = chunk_v2 or v2
            used += len(value) + 1
        if chunk:
            yield target, _HEAD[chunk_v2] + b",".join(chunk) + _TAIL, len(chunk)
