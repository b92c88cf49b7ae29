"""The Faust side of the phase join: a table keyed by request_id, an agent over the phases topic, and a timer
for abandoned generations and orphans. Entries move between the table and join.py's pure functions in an order
that loses nothing on kill -9: (1) apply a batch of phases in memory; (2) publish the joined generations and WAIT
until Kafka has them; (3) only then write the new entries to the table and its changelog, and wait for that
before the batch is acked. A crash before 3 publishes the same generations again (ingest drops them by
request_id); after 3, re-delivered phases are duplicates. A changelog written before 2 could mark done a
generation that never reached Kafka: lost (docs/phases.md, "Nothing lost on kill -9").

The table is written through `table.data` and its changelog, not `table[key] = ...`: a batch (take_events) and
the timer have no "current event" for Faust to take the partition from. Faust recovers the dict from that changelog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import msgspec

from . import handoff, join, publish, resume
from .phases_in import read_phases
from .ready import is_ready, until_ready
from .sequence import Sequencer

log = logging.getLogger("phasemeter.join")
# msgspec, as in fast_decode.py: the same compact JSON as the standard library's, which had been 9 % of the
# event loop in a join run (envelopes and changelog entries).
_dumps = msgspec.json.encode


# The join's position per phases partition lives in the table, so it reaches the changelog in the same awaited
# write as the entries it covers. Longer than any valid request_id (128 characters): no collision.
_PROGRESS = b"\x00phasemeter/next-offset/" + b"." * 128 + b"/"


def progress_key(partition: int) -> bytes:
    return _PROGRESS + str(partition).encode()


def is_progress_key(key: bytes) -> bool:
    return key.startswith(_PROGRESS)


def phase_envelopes(phases: list[tuple[int, float, dict]]) -> list[tuple[int, bytes]]:
    """Ingest's phases -> (partition, message), batched per partition: Kafka's per-message cost dominated the join."""
    by_partition: dict[int, list] = {}
    for partition, ts, fields in phases:
        by_partition.setdefault(partition, []).append([ts, fields])
    return [(p, _dumps({"phases": part}))
            for p, items in sorted(by_partition.items()) for part in join.chunks(items)]


class Join:
    """State shared by the agent, the timer and the web views."""

    def __init__(self, app, settings, bucket, offsets):
        self.app, self.settings, self.bucket, self.offsets = app, settings, bucket, offsets
        n = settings.topic_partitions
        raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw", partitions=n,
                   internal=True)
        # acks off: committed from the table's positions (handoff.Handoff)
        self.phases = app.topic(settings.phase_topic_name, acks=False, **raw)
        self.joined = app.topic(settings.joined_topic_name, **raw)
        # Raw keys; no value_type: JSON values (plain dicts), also when recovered from the changelog.
        self.table = app.Table("phasemeter-join", default=None, partitions=n, key_type=bytes)
        self.clocks = join.PartitionClocks()
        self.lock = asyncio.Lock()  # the agent's batch and the timer never interleave
        self.counts: Counter = Counter()
        self.sequencer = Sequencer()
        self.handoff = handoff.Handoff(settings.stop_grace_s, name="join")

    def active_partitions(self) -> set[int]:
        """Entries of partitions this worker owns (standbys share the dict)."""
        name = self.phases.get_topic_name()
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == name}

    def owned_entries(self):
        mine = self.active_partitions()
        return [(k, v) for k, v in list(self.table.data.items())
                if v is not None and v.get("p") in mine and not is_progress_key(k)]

    async def positions(self, tps) -> dict:
        """The durable positions of `tps` (partitions of the phases topic) the table recorded."""
        data = self.table.data
        return {(t, p): entry["next"] for t, p in tps if (entry := data.get(progress_key(p))) is not None}

    async def _save_positions(self, positions: dict, entries: dict | None = None) -> None:
        """Step 3 and the commit: the positions travel with the `entries` they cover, in one awaited write."""
        entries = {} if entries is None else entries  # added to in place: a batch's entries are not copied
        entries.update({progress_key(p): (p, {"p": p, "next": o}) for (_, p), o in positions.items()})
        await self._write(entries)
        await self.handoff.commit(self.app, positions)

    async def _publish(self, outputs: list[join.Output]) -> None:
        """Step 2: joined generations and orphan records as envelopes, on Kafka before the table says done."""
        name = self.joined.get_topic_name()
        # Faust's producer directly (Topic.send costs ~0.5 ms a message); each future resolves once Kafka has it.
        envelopes = [_dumps({"schema_version": 2, "kind": "batch", "events": [rec for _, rec in part]})
                     for part in join.chunks(outputs)]
        futures = [await self.app.producer.send(name, None, value, None, None, None) for value in envelopes]
        await asyncio.gather(*futures)

    async def _write(self, changes: dict[bytes, tuple[int, dict | None]]) -> None:
        """Step 3: the batch is acked only once the changelog has it (Faust's send_soon buffer gives up flushing
        after 0.1 s). One record per key, as Faust replays them into the table."""
        data, records = self.table.data, []
        for key, (partition, entry) in changes.items():
            if entry is None:
                data.pop(key, None)  # a tombstone: compaction forgets the key
            else:
                data[key] = entry
            records.append((key, None if entry is None else _dumps(entry), partition))
        sent = await publish.send_batched(self.app, self.table.changelog_topic.get_topic_name(), records)
        await asyncio.gather(*(future for future, _ in sent))

    def phase_messages(self, phases: list[tuple[int, float, dict]]) -> list:
        """Ingest's phases -> messages for the phases topic; ingest delivers them (publish.py) before its progress."""
        name = self.phases.get_topic_name()
        return [(name, None, value, partition) for partition, value in phase_envelopes(phases)]

    async def on_batch(self, events) -> None:
        async with self.lock:
            # In offset order from the table's position (resume.py): Faust's commit may be past undelivered phases.
            events = (await resume.admit(self.app, self.offsets, self.sequencer, events, self.positions,
                                         self._save_positions, self.counts)).events
            if not events:
                return
            now = time.time()
            data = self.table.data
            changes: dict[bytes, tuple[int, dict | None]] = {}
            outputs: list[join.Output] = []
            for event in events:
                p = event.message.partition
                # [[gateway timestamp, phase fields], ...], checked again here; a bad one is dead-lettered via ingest.
                pairs, refused = read_phases(event.value, now)
                outputs += refused
                self.counts["phases_refused"] += len(refused)
                for ts, fields in pairs:
                    self.clocks.observe(p, ts, now)
                    rid = fields["request_id"]
                    key = rid.encode()
                    entry = changes[key][1] if key in changes else data.get(key)
                    new, outs, note = join.apply(entry, rid, fields, p, ts)
                    self.counts["phases_" + note] += 1
                    if new is not entry:
                        changes[key] = (p, new)
                    outputs += outs
            await self._publish(outputs)
            positions = self.sequencer.position({(e.message.topic, e.message.partition) for e in events})
            await self._save_positions(positions, changes)
            self.counts["generations_joined"] += sum(1 for _, r in outputs if r["kind"] == "generation")

    async def on_tick(self) -> None:
        s = self.settings
        async with self.lock:
            # Checked after the batch before has ended: a half-replayed table could expire what its changelog has
            # ended, and a tick that waited through a revoke would expire entries handed over.
            if not is_ready(self.app):
                return
            now = time.time()
            entries = self.owned_entries()
            newest: dict[int, float] = {}
            for _, entry in entries:
                newest[entry["p"]] = max(newest.get(entry["p"], 0.0), join.latest(entry))
            clocks = {p: self.clocks.clock(p, now, ts) for p, ts in newest.items()}
            changes, outputs = {}, []
            for key, entry in entries:
                new, outs, note = join.expire(entry, key.decode(), clocks[entry["p"]],
                                              s.abandon_after_s, s.orphan_grace_s)
                if note is not None:
                    self.counts[note] += 1
                    changes[key] = (entry["p"], new)
                    outputs += outs
            await self._publish(outputs)
            await self._write(changes)

    def inflight(self) -> dict:
        now = time.time()
        rows, awaiting = join.inflight((e for _, e in self.owned_entries()), now, self.bucket)
        return {"generated_at": now, "partitions": sorted(self.active_partitions()),
                "in_flight": rows, "awaiting_start": awaiting,
                "abandon_after_s": self.settings.abandon_after_s, "counts": dict(self.counts)}


def install(app, settings, bucket, offsets, crash) -> Join:
    """Register the join agent and timer on `app`; `crash` wraps the agent so a bug exits rather than idles."""
    state = Join(app, settings, bucket, offsets)

    @app.agent(state.phases, name="phasemeter.join")
    async def join_phases(stream):
        async def body():
            try:
                async for events in stream.take_events(1000, within=0.2):
                    await until_ready(app)
                    await state.handoff.run(state.on_batch(events))
            except asyncio.CancelledError:
                await state.handoff.stopping(None)  # a stop: says what it left (once)
                raise
        await crash("join", body)

    @app.timer(settings.expiry_tick_s, name="phasemeter.expire")
    async def expire_tick():
        try:
            # Published and written like a batch: a stop or a revoke waits for both.
            await state.handoff.run(state.on_tick())
        except Exception:  # a failed tick is retried by the next one
            log.exception("expiry tick failed")

    return state
