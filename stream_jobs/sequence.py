"""Strict per-partition sequencing: a record is processed only when its
offset is the next one this worker owes the store.

Why: Faust's own offset bookkeeping is not a safe source of progress. After
a seek back it dropped re-fetched records and committed the jump as an acked
gap, so a restarted worker started past records nobody stored (two
partitions lost their first ~3,200 records; docs/delivery.md has the
mechanism and the evidence). So the worker keeps its own position,
`next[tp]`, loaded from durable state (resume.py), and checks every record
against it:

* offset < next  -> already processed (a re-delivery after a seek or a
  rebalance): skipped;
* offset == next -> processed, next advances;
* offset > next  -> a gap: records were skipped by the fetch position. The
  record is not processed, and the caller seeks the partition back to
  `next`. Records still buffered from before the seek also arrive as gaps;
  they are dropped without a second seek until `reseek_after_s` passed.

A partition can also fall silent behind its end: Faust drops the rest of a
fetch when a rebalance changes the group's generation or pauses the
partition mid-fetch, and relies on a later seek to the committed offset,
which our own positions make unreliable. With nothing else arriving, no gap
is ever seen (docs/delivery.md). `behind` finds such partitions from the
broker's high-water marks and has them sought back like a gap. A partition
none of whose records has come since the assignment has no position yet:
its durable one is `note`d for `behind`, so a partition Faust never delivers
is sought back too, while the agent still loads (and saves) its own.

A gap that does not close after `max_seeks` seeks is reported as `stuck`.
The caller jumps over it only when the broker confirms the records are gone
(retention deleted them); otherwise the partition stalls, visibly, and is
sought again: never a silent skip.

Pure: no Faust, no I/O. Events only need `.message.topic/.partition/.offset`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TP = tuple[str, int]


@dataclass
class Admitted:
    events: list = field(default_factory=list)  # in sequence: process these
    stale: int = 0                              # already processed: skipped
    gapped: int = 0                             # beyond a gap: dropped, re-read after the seek
    seek: dict[TP, int] = field(default_factory=dict)      # seek these partitions to these offsets
    stuck: dict[TP, tuple[int, int]] = field(default_factory=dict)  # tp -> (next, first offset seen)


class Sequencer:
    def __init__(self, reseek_after_s: float = 5.0, max_seeks: int = 6):
        self.next: dict[TP, int] = {}
        self.reseek_after_s = reseek_after_s
        self.max_seeks = max_seeks
        self._seeking: dict[TP, tuple[int, float, int]] = {}  # tp -> (offset, when, attempts)
        self._seen: dict[TP, float] = {}  # tp -> when a record of it last came to `admit`
        self._behind: dict[TP, tuple[float, int]] = {}  # tp -> (first seen behind, position then)
        self._noted: dict[TP, int] = {}  # tp -> durable position, for partitions not loaded yet

    def unknown(self, events) -> set[TP]:
        """Partitions in `events` whose position must be loaded first."""
        return {(e.message.topic, e.message.partition) for e in events} - self.next.keys()

    def load(self, positions: dict[TP, int]) -> None:
        self.next.update(positions)

    def unheard(self, tps) -> set[TP]:
        """Partitions of `tps` with no position, loaded or noted."""
        return set(tps) - self.next.keys() - self._noted.keys()

    def note(self, positions: dict[TP, int]) -> None:
        """The durable positions of owned partitions no record has come for
        (read by the idle check, not by the agent): `behind`, `overdue` and
        `owed` count from them until the agent loads its own."""
        self._noted.update({tp: o for tp, o in positions.items() if tp not in self.next})

    def _expected(self, tp: TP) -> int | None:
        return self.next.get(tp, self._noted.get(tp))

    def forget(self) -> None:
        """After a rebalance another worker may have moved a partition on."""
        self.next.clear()
        self._seeking.clear()
        self._seen.clear()
        self._behind.clear()
        self._noted.clear()

    def jump(self, tp: TP, offset: int) -> None:
        """Accept a confirmed hole: continue at `offset`."""
        if offset > self.next.get(tp, -1):
            self.next[tp] = offset
        self._seeking.pop(tp, None)

    def forget_seek(self, tp: TP) -> None:
        """Start the seek attempts over (the next gap seeks at once)."""
        self._seeking.pop(tp, None)

    def admit(self, events, now: float) -> Admitted:
        out = Admitted()
        gap_at: dict[TP, int] = {}
        for event in events:
            msg = event.message
            tp, offset = (msg.topic, msg.partition), msg.offset
            self._seen[tp] = now
            expected = self.next[tp]
            if offset < expected:
                out.stale += 1
            elif offset == expected and tp not in gap_at:
                out.events.append(event)
                self.next[tp] = offset + 1
                self._seeking.pop(tp, None)
            else:
                # Beyond a gap, or after one earlier in this batch: everything
                # later of this partition waits for the re-read.
                out.gapped += 1
                gap_at.setdefault(tp, offset)
        for tp, first in gap_at.items():
            expected = self.next[tp]
            target, since, attempts = self._seeking.get(tp, (None, 0.0, 0))
            if target == expected and now - since < self.reseek_after_s:
                continue  # a seek is under way; these were buffered before it
            if target == expected and attempts >= self.max_seeks:
                out.stuck[tp] = (expected, first)
                continue
            self._seeking[tp] = (expected, now, attempts + 1 if target == expected else 1)
            out.seek[tp] = expected
        return out

    def overdue(self, now: float) -> dict[TP, int]:
        """Seeks under way longer than `reseek_after_s` whose record has not
        arrived: seek them again (and restart their clock)."""
        out = {}
        for tp, (target, since, attempts) in list(self._seeking.items()):
            if self._expected(tp) == target and now - since >= self.reseek_after_s:
                self._seeking[tp] = (target, now, attempts)
                out[tp] = target
        return out

    def behind(self, ends: dict[TP, int], now: float) -> dict[TP, int]:
        """Partitions whose log end (`ends`, the fetcher's high-water marks)
        has stayed past their position for `reseek_after_s`, counted from the
        first call that saw it so, with no record of theirs arriving since
        and no seek under way: seek them to their position. From then on
        they are a seek under way (`overdue`, and `stuck` after `max_seeks`).
        A high-water mark moves with the fetch that brings the records, so a
        partition is behind for a moment before each delivery."""
        out = {}
        for tp, end in ends.items():
            expected = self._expected(tp)
            if expected is None or end <= expected or tp in self._seeking:
                self._behind.pop(tp, None)
                continue
            since, at = self._behind.get(tp, (now, expected))
            if at != expected or self._seen.get(tp, 0.0) > since:  # it moved: count again
                since, at = now, expected
            if now - since >= self.reseek_after_s:
                self._behind.pop(tp, None)
                self._seeking[tp] = (expected, now, 1)
                out[tp] = expected
            else:
                self._behind[tp] = (since, at)
        return out

    def position(self, tps) -> dict[TP, int]:
        """Where each partition of `tps` this worker has processed continues."""
        return {tp: self.next[tp] for tp in tps if tp in self.next}

    def owed(self, tps) -> dict[TP, int]:
        """The next offset owed to the store, also for partitions only noted."""
        return {tp: o for tp in tps if (o := self._expected(tp)) is not None}
