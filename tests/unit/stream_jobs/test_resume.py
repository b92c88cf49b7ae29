"""The idle check (resume.reseek_behind) covers every partition the worker
owns, also one none of whose records came since the assignment, fetched or
not: its durable position is read, never saved, and the partition is sought
back there once it stays silent behind its end."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

from faust.types import TP as FaustTP

from phasemeter.stream_jobs import resume
from phasemeter.stream_jobs.sequence import Sequencer


class Consumer:
    """What the check reads of Faust's consumer: the assignment, the
    fetcher's high-water marks, the group's committed offsets, and seeks."""

    def __init__(self, owned, highwater, committed):
        self.owned, self.marks, self._committed_offset = owned, highwater, committed
        self.seeks: list[tuple[int, int]] = []

    def assignment(self):
        return {FaustTP(t, p) for t, p in self.owned}

    def highwater(self, tp):
        return self.marks.get((tp.topic, tp.partition))

    async def seek(self, tp, offset):
        self.seeks.append((tp.partition, offset))


class LogOffsets:
    def __init__(self, ends, starts):
        self._ends, self._starts, self.asked = ends, starts, []

    async def ends(self, tps):
        self.asked.append(sorted(tps))
        return {tp: self._ends[tp] for tp in tps}

    async def starts(self, tps):
        return {tp: self._starts[tp] for tp in tps}


def test_owned_partitions_never_delivered_are_sought_back_from_their_durable_positions(monkeypatch):
    t = "in"
    owned = [(t, 0), (t, 1), (t, 2), (t, 3), ("other", 0)]
    # t/0 fetched, t/1 never fetched (no high-water mark); t/2 has no durable
    # position (the group's committed offset stands in); t/3 is caught up.
    consumer = Consumer(owned, {(t, 0): 20, (t, 2): 9, (t, 3): 7, ("other", 0): 99}, {FaustTP(t, 2): 5})
    app = SimpleNamespace(consumer=consumer)
    offsets = LogOffsets({(t, 1): 21}, {})
    durable = {(t, 0): 18, (t, 1): 19, (t, 3): 7, (t, 9): 3}  # t/9: another worker's
    loads = []

    async def load(tps):  # as the store's ledger reads: every partition of the topics asked
        loads.append(set(tps))
        return dict(durable)

    seq, counts = Sequencer(reseek_after_s=5.0), Counter()
    clock = [1000.0]
    monkeypatch.setattr(resume.time, "time", lambda: clock[0])

    async def tick(at):
        clock[0] = at
        await resume.reseek_behind(app, offsets, seq, {t}, load, counts)

    asyncio.run(tick(1000.0))
    assert loads == [{(t, 0), (t, 1), (t, 2), (t, 3)}]
    assert seq.next == {}  # nothing loaded for the agent: it loads (and saves) its own
    assert seq.owed({(t, 2), (t, 9)}) == {(t, 2): 5}  # only what it owns is noted
    assert offsets.asked == [[(t, 1)]]
    assert consumer.seeks == []
    asyncio.run(tick(1005.0))
    assert sorted(consumer.seeks) == [(0, 18), (1, 19), (2, 5)] and counts["idle_reseeks"] == 3
    assert loads == [{(t, 0), (t, 1), (t, 2), (t, 3)}]  # read once per assignment


def test_a_partition_the_agent_has_loaded_is_not_read_again():
    consumer = Consumer([("in", 0)], {("in", 0): 4}, {})
    seq = Sequencer(reseek_after_s=5.0)
    seq.load({("in", 0): 4})

    async def load(tps):
        raise AssertionError(f"read again: {tps}")

    asyncio.run(resume.reseek_behind(SimpleNamespace(consumer=consumer), LogOffsets({}, {}), seq, {"in"}, load,
                                     Counter()))
    assert consumer.seeks == []
