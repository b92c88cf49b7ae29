"""Handing partitions over cleanly: what a stopping or rebalancing worker leaves for the member that takes
its partitions (`Handoff`, one per agent: ingest, join).
"""

from __future__ import annotations

import asyncio
import logging

from faust.types import TP as FaustTP

from . import faust_adapter
from .sequence import TP

log = logging.getLogger("phasemeter.worker")


class Handoff:
    """One agent's side of a hand-off: its work in hand and its commits.

    The group's offset is committed here, only at positions the agent has made durable (`commit`), so a member
    starting from it neither skips nor re-reads a record. Faust would commit what its streams acked, and
    `take_events` acks a batch in a `finally` even if the body did not finish, which lost records
    (docs/delivery.md): the agents' topics are consumed with acks off. Faust then no longer waits for a batch
    in hand on a stop or a revoke, so `run` and `settle` do, instead of cutting it at whatever await the
    cancellation hit. The join's expiry timer is work in hand too: cut between its publish and its table
    write, it would leave the new owner an entry to expire again (a generation published twice)."""

    def __init__(self, grace_s: float, on_stopped=None, name: str = "ingest"):
        self.grace_s, self.name = grace_s, name
        # Called once a stop has settled or cut the work in hand: what still runs in a thread on the agent's
        # behalf (a cut batch's store write, or the reseek timer's read of positions, retrying while the store is
        # down) cannot be cancelled from here and would keep the process from exiting.
        self.on_stopped = on_stopped
        self.in_hand: set[asyncio.Future] = set()
        self._want: dict = {}  # FaustTP -> newest durable position not committed yet
        self._committer: asyncio.Future | None = None
        self._committing: dict = {}  # FaustTP -> offset of the commit in flight
        self._dropped: dict = {}  # FaustTP -> offset the group did not take (revoked meanwhile, or refused)
        self._cut = False
        self._stopping = False
        self._said = False  # what a stop left is said once

    async def commit(self, app, positions: dict[TP, int]) -> None:
        """After `positions` are durable: commit them, off the batch's path. One background task commits the
        newest, as a commit's round trip and producer flush need not hold up the next batch (its gain in rate
        was within the runs' scatter). `settle` waits for it, so a hand-off has everything durable committed.
        A failure is not fatal: the next batch commits again."""
        self._want.update({FaustTP(*tp): int(offset) for tp, offset in positions.items()})
        if self._want and (self._committer is None or self._committer.done()):
            self._committer = asyncio.ensure_future(self._commit_newest(app))

    async def _commit_newest(self, app) -> None:
        while self._want:
            offsets, self._want = self._want, {}
            self._committing = offsets
            try:
                dropped = await faust_adapter.commit_offsets(app, offsets)
            except Exception as exc:
                log.warning("committing %s failed (%s); the next batch commits again", offsets, exc)
                continue
            self._committing = {}
            for tp in offsets.keys() - dropped.keys():
                self._dropped.pop(tp, None)
            if dropped:
                self._dropped.update(dropped)
                log.warning("the group did not take the commit of %s (the partition was revoked, or the broker "
                            "refused it): a member without its own durable position re-reads from the group's",
                            ", ".join(f"{tp.topic}/{tp.partition}@{o}" for tp, o in sorted(dropped.items())))

    async def run(self, work):
        """Run the coroutine `work` (one batch) so that a stop lets it end. Faust stops an agent by cancelling
        its task and waiting for it, and stops the consumer and producer only after the agents: shielded, the
        batch runs on for up to `grace_s`. A batch cut anyway (grace exceeded, SIGKILL) is re-read from the
        durable position: slower, never wrong. Once a stop has begun no new work starts (the join's expiry
        timer ticks on until Faust stops its timers, after the agents)."""
        if self._stopping:
            work.close()
            return None
        task = self.start(work)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await self.stopping(task)
            raise

    def start(self, work) -> asyncio.Future:
        """Start `work` (one batch) without waiting: in hand from now on, for `settle` and `stopping`. Whoever
        holds the task awaits it (the ingest agent decodes its next batch meanwhile)."""
        task = asyncio.ensure_future(work)
        self.in_hand.add(task)
        task.add_done_callback(self.in_hand.discard)
        return task

    async def stopping(self, task: asyncio.Future | None) -> None:
        """A stop reached the agent: the work in hand finishes (up to `grace_s`) and is committed; past the
        grace, `task` (the agent's batch, if any) is cut, to be re-read by the next owner. Then logs what it left."""
        self._stopping = True
        if task is not None and not task.done():
            log.warning("stopping: finishing the batch in hand (up to %.0f s)", self.grace_s)
        if not await self.settle():  # the batch, then its commit
            if self.in_hand:
                self._cut = True
                log.warning("stopping: the batch in hand did not finish in %.0f s; it will be re-read", self.grace_s)
            # All of it, not only the caller's: the join agent's stop may find the expiry timer's work in hand,
            # which the timer's own stop would then wait for again.
            for work in {task, *self.in_hand} - {None}:
                work.cancel()
        if self.on_stopped is not None:
            self.on_stopped()
        if not self._said:
            self._said = True
            log.warning("stopping %s: left for the next start: %s", self.name, self.left())

    def left(self) -> str:
        """What a stop leaves for the next start, which resumes from the durable positions (the store's for
        ingest, the join table's), not from the group's committed offsets: both are safe."""
        parts = ["a batch in hand, cut: it is re-read"] if self._cut else []
        uncommitted = self._dropped | self._committing | self._want
        if uncommitted:
            parts.append("positions durable but not committed to the group (the broker did not take the commit): "
                         + ", ".join(f"{tp.topic}/{tp.partition}@{o}" for tp, o in sorted(uncommitted.items())))
        return "; ".join(parts) or "nothing: every durable position is committed"

    async def settle(self) -> bool:
        """Wait (up to `grace_s` each) for the work in hand, then for its commit; True once neither is pending."""
        pending = {t for t in self.in_hand if not t.done()}
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.grace_s)
            if late:
                return False
        if self._committer is not None and not self._committer.done():
            done, _ = await asyncio.wait({self._committer}, timeout=self.grace_s)
            return bool(done)
        return True
