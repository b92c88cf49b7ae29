"""Strict per-partition sequencing: a record is processed only when its offset is the next one this worker
owes the store (`next[tp]`, loaded from durable state by resume.py). Faust's own offsets are no safe record of
progress: after a seek back it dropped re-fetched records and committed the jump, so a restarted worker
skipped records nobody stored (docs/delivery.md).

A record below `next` is a re-delivery, skipped. One above it is a gap: not processed, the caller seeks back to
`next`, and records buffered before that seek are dropped without another seek for `reseek_after_s`. A gap
still open after `max_seeks` seeks is `stuck`: the caller jumps it only when the broker confirms the records
are gone (retention), else the partition stalls, visibly, and is sought again: never a silent skip.

A partition can also fall silent behind its end, with no gap ever seen (Faust drops the rest of a fetch that a
rebalance or a pause cuts; docs/delivery.md). `behind` finds such partitions from the high-water marks, also
those with no record since the assignment, whose durable positions are `note`d (the agent still loads its own).

Pure: no Faust, no I/O. Events need only `.message.topic/.partition/.offset`.
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
        """Durable positions of owned partitions no record has come for (read by the idle check): `behind`,
        `overdue` and `owed` count from them until the agent loads its own."""
        self._noted.update({tp: o for tp, o in positions.items() if tp not in self.next})

    def _expected(self, tp: TP) -> int | None:
        return self.next.get(tp, self._noted.get(tp))

    def forget(self) -> None:
        """After a rebalance another worker may have moved a partition on."""
        for state in (self.next, self._seeking, self._seen, self._behind, self._noted):
            state.clear()

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
                # Beyond a gap, or after one earlier in this batch: the rest of the partition waits for the re-read.
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
        """Seeks under way for `reseek_after_s` whose record has not arrived: seek again, restarting the clock."""
        out = {}
        for tp, (target, since, attempts) in list(self._seeking.items()):
            if self._expected(tp) == target and now - since >= self.reseek_after_s:
                self._seeking[tp] = (target, now, attempts)
                out[tp] = target
        return out

    def behind(self, ends: dict[TP, int], now: float) -> dict[TP, int]:
        """Partitions whose log end (`ends`, the fetcher's high-water marks) stayed past their position for
        `reseek_after_s`, with no record arriving and no seek under way: seek them there, then treat them as a
        seek under way (`overdue`, `stuck`). The wait is needed because a high-water mark moves with the fetch
        that brings the records: a partition looks behind for a moment before each delivery."""
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
