"""The Faust side of strict sequencing (sequence.py), shared by the ingest and join agents: load each newly
seen partition's position, seek back over gaps, report partitions that stay stuck.

Positions come from the agent's durable state (`load`: the store's progress ledger for ingest, the join table
for the join). A partition with none starts where the group committed, or at the log's start, and that start is
saved (`save`) before any record of it is processed. The committed offset is never read again, so a restart
that finds it ahead of the store re-reads the gap instead of skipping it: through the first record past the
gap or, if none comes, the idle check (`reseek_behind`).
"""

from __future__ import annotations

import logging
import time

from faust.types import TP as FaustTP

from . import faust_adapter
from .sequence import TP, Admitted, Sequencer

log = logging.getLogger("phasemeter.worker")


async def reseek_overdue(app, seq, counts) -> None:
    """Repeat seeks whose records have not come back in time, even when nothing else arrives for the partition."""
    for tp, offset in seq.overdue(time.time()).items():
        counts["gap_reseeks"] += 1
        log.warning("%s/%d: offset %d not re-delivered yet; seeking again", *tp, offset)
        try:
            await app.consumer.seek(FaustTP(*tp), offset)
        except Exception as exc:
            log.warning("%s/%d: seek to %d failed (%s)", *tp, offset, exc)


async def _seek_back(app, seq, tp: TP, offset: int) -> None:
    """A seek the sequencer asked for. If it fails (e.g. the partition was revoked meanwhile: the next owner
    loads its own position), the sequencer forgets it, so the next check seeks anew."""
    try:
        await app.consumer.seek(FaustTP(*tp), offset)
    except Exception as exc:
        log.warning("%s/%d: seek to %d failed (%s); sought again on the next check", *tp, offset, exc)
        seq.forget_seek(tp)


def fetched_ends(consumer, topics) -> dict[TP, int]:
    """{(topic, partition): high-water mark} of this consumer's partitions of `topics`, as their last fetch saw
    it; a partition not fetched yet is left out."""
    ends = {}
    for tp in consumer.assignment():
        if tp.topic not in topics:
            continue
        try:
            end = consumer.highwater(tp)
        except Exception:
            continue
        if isinstance(end, int) and end >= 0:
            ends[tp.topic, tp.partition] = end
    return ends


async def reseek_behind(app, offsets, seq, topics, load, counts) -> None:
    """Seek back the partitions of `topics` behind their log end with nothing arriving (Sequencer.behind).
    Called only while the agent is idle, since a busy agent's records wait in Faust's buffers. `load` reads
    durable positions, as for `admit`."""
    owned = {(tp.topic, tp.partition) for tp in app.consumer.assignment() if tp.topic in topics}
    # A partition with no record since the assignment has no position here, and one never fetched no high-water
    # mark: Faust's seek at assignment does not always deliver them (docs/delivery.md).
    unheard = seq.unheard(owned)
    if unheard:
        found, _ = await positions(app, offsets, unheard, load)  # the starts are the agent's to save
        seq.note(found)
    ends = fetched_ends(app.consumer, topics)
    if unfetched := owned - ends.keys():
        try:
            ends.update(await offsets.ends(unfetched))
        except Exception as exc:  # the broker away: checked again on the next tick
            log.warning("end offsets of %d unfetched partition(s) not read (%s)", len(unfetched), exc)
    for tp, offset in seq.behind(ends, time.time()).items():
        counts["idle_reseeks"] += 1
        log.warning("%s/%d: %d record(s) in the log past offset %d, none delivered; seeking back",
                    *tp, ends[tp] - offset, offset)
        await _seek_back(app, seq, tp, offset)


async def positions(app, offsets, tps: set[TP], load) -> tuple[dict[TP, int], dict[TP, int]]:
    """-> (each of `tps`' position, the group starts among them): the durable one `load` reads, else where the
    partition begins: the group's committed offset (Faust read it when it sought after assignment), else the first
    offset Kafka still has. Filtered to `tps`, as a `load` may read other partitions of its topics."""
    found = {tp: o for tp, o in (await load(tps)).items() if tp in tps}
    committed = faust_adapter.committed_offsets(app)
    unsaved = {tp: committed.get(FaustTP(*tp)) for tp in tps - found.keys()}
    earliest = await offsets.starts([tp for tp, o in unsaved.items() if not o])  # none missing: {} at once
    start = {tp: int(o or earliest.get(tp) or 0) for tp, o in unsaved.items()}
    return found | start, start


async def admit(app, offsets, seq: Sequencer, events, load, save, counts) -> Admitted:
    """-> the events of this batch to process, in offset order per partition. `load(tps)` and
    `save(positions)` are awaitables over the agent's state; `offsets` is a log_offsets.LogOffsets."""
    # Records prefetched for a partition a rebalance has since moved are the new owner's to process.
    owned = app.consumer.assignment()
    mine = [e for e in events if e.message.tp in owned]
    if len(mine) < len(events):
        counts["not_owned_dropped"] += len(events) - len(mine)
        events = mine
    unknown = seq.unknown(events)
    if unknown:
        found, start = await positions(app, offsets, unknown, load)
        if start:
            await save(start)
        seq.load(found)
    out = seq.admit(events, time.time())
    counts["stale_skipped"] += out.stale
    counts["gap_dropped"] += out.gapped
    for tp, offset in out.seek.items():
        counts["gap_seeks"] += 1
        log.warning("%s/%d: fetched past offset %d without delivering it; seeking back", *tp, offset)
        await _seek_back(app, seq, tp, offset)
    for tp, (expected, first) in out.stuck.items():
        earliest = (await offsets.starts([tp])).get(tp) or 0
        if earliest > expected:
            # Retention deleted them before any worker read them: nothing can bring them back.
            counts["expired_unread"] += earliest - expected
            log.error("%s/%d: offsets %d..%d expired before they were read", *tp, expected, earliest - 1)
            seq.jump(tp, earliest)
        else:
            # Never skipped silently: the partition stalls, visibly, and the seek is retried.
            counts["stalled_seeks"] += 1
            log.error("%s/%d: offset %d is in the log but is not delivered (first seen %d); seeking again",
                      *tp, expected, first)
            seq.forget_seek(tp)
    return out
