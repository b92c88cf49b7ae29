"""handoff.Handoff: a batch in hand survives the agent's cancellation (a
stop) up to the grace period, and a rebalance can wait for it."""

from __future__ import annotations

import asyncio

import pytest

from phasemeter.stream_jobs.handoff import Handoff


class Partitions:
    """An assignment: the TPs of these partition numbers, of any topic."""

    def __init__(self, numbers: set[int]):
        self.numbers = numbers

    def __contains__(self, tp) -> bool:
        return tp.partition in self.numbers


class Assigned:
    """Faust's consumer as the hand-off commits through it: offsets of partitions not assigned are discarded,
    and the answer says whether anything was committed."""

    def __init__(self, *partitions: int, round_trip_s: float = 0.0):
        self.partitions, self.round_trip_s, self.calls = set(partitions), round_trip_s, []

    def assignment(self):
        return Partitions(self.partitions)

    async def _commit_offsets(self, offsets):
        await asyncio.sleep(self.round_trip_s)
        taken = {(tp.topic, tp.partition): o for tp, o in offsets.items() if tp.partition in self.partitions}
        self.calls.append(taken)
        return bool(taken)


def test_a_stop_lets_the_batch_in_hand_finish_then_stops():
    async def main():
        h, steps = Handoff(grace_s=5), []

        async def batch():
            await asyncio.sleep(0.2)
            steps.append("stored")
            await asyncio.sleep(0.1)
            steps.append("committed")

        agent = asyncio.ensure_future(h.run(batch()))
        await asyncio.sleep(0.05)
        agent.cancel()  # what Faust does to an agent on SIGTERM
        with pytest.raises(asyncio.CancelledError):
            await agent
        return steps, h.in_hand

    steps, in_hand = asyncio.run(main())
    assert steps == ["stored", "committed"]
    assert in_hand == set()


def test_a_batch_longer_than_the_grace_is_cut_and_the_stop_goes_on():
    async def main():
        h, steps = Handoff(grace_s=0.1), []

        async def batch():
            try:
                await asyncio.sleep(10)
                steps.append("finished")
            except asyncio.CancelledError:
                steps.append("cut")
                raise

        agent = asyncio.ensure_future(h.run(batch()))
        await asyncio.sleep(0.05)
        agent.cancel()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(asyncio.CancelledError):
            await agent
        await asyncio.sleep(0)  # the cut batch sees its cancellation
        return steps, loop.time() - t0

    steps, waited = asyncio.run(main())
    # Cut, not finished: a stop that waited for the 10 s batch would see it
    # finish, whatever the load; and it gave the batch its grace first.
    assert steps == ["cut"]
    assert waited >= 0.1


def test_settle_waits_for_the_batch_in_hand_and_is_immediate_without_one():
    async def main():
        h, steps = Handoff(grace_s=5), []
        assert await h.settle() is True

        async def batch():
            await asyncio.sleep(0.2)
            steps.append("done")

        agent = asyncio.ensure_future(h.run(batch()))
        await asyncio.sleep(0.05)
        settled = await h.settle()  # a rebalance's revoke, from another task
        steps.append("revoked")
        await agent
        return settled, steps

    settled, steps = asyncio.run(main())
    assert settled is True
    assert steps == ["done", "revoked"]


def test_settle_waits_for_every_piece_of_work_in_hand():
    # The join's batch and its expiry timer both publish and then write the
    # table; a revoke must wait for both, whichever started first.
    async def main():
        h, steps = Handoff(grace_s=5), []

        async def work(name, seconds):
            await asyncio.sleep(seconds)
            steps.append(name)

        tick = asyncio.ensure_future(h.run(work("tick written", 0.3)))
        await asyncio.sleep(0.01)
        batch = asyncio.ensure_future(h.run(work("batch written", 0.1)))
        await asyncio.sleep(0.01)
        settled = await h.settle()
        steps.append("revoked")
        await asyncio.gather(tick, batch)
        return settled, steps, h.in_hand

    settled, steps, in_hand = asyncio.run(main())
    assert settled is True
    assert steps == ["batch written", "tick written", "revoked"]
    assert in_hand == set()


def test_an_error_in_the_batch_reaches_the_agent():
    async def main():
        async def batch():
            raise RuntimeError("store said no")

        await Handoff(grace_s=1).run(batch())

    with pytest.raises(RuntimeError, match="store said no"):
        asyncio.run(main())


def test_commits_run_in_the_background_newest_wins_and_settle_waits_for_them():
    class App:
        consumer = Assigned(0, 1, round_trip_s=0.1)  # records what Faust's consumer commits

    async def main():
        h, app = Handoff(grace_s=5), App()
        await h.commit(app, {("t", 0): 10})  # returns at once: not on the batch's path
        await asyncio.sleep(0.02)  # that commit is now in flight
        await h.commit(app, {("t", 0): 20, ("t", 1): 5})
        await h.commit(app, {("t", 0): 30})
        assert app.consumer.calls == []
        assert await h.settle() is True  # a stop or a revoke waits for the commits
        return app.consumer.calls

    calls = asyncio.run(main())
    # The in-flight one, then the rest coalesced: the newest position of each partition.
    assert calls == [{("t", 0): 10}, {("t", 0): 30, ("t", 1): 5}]


def test_on_stopped_runs_once_the_stop_has_settled_or_cut_the_batch_and_with_nothing_in_hand():
    """on_stopped (the ingest agent's: the sink stops retrying) runs after
    the batch in hand ended in time, after it was cut past the grace, and on
    a stop with nothing in hand: a store read of the reseek timer may still
    be retrying in a thread then, which would keep the process alive."""
    async def stop_during(seconds: float | None, grace_s: float) -> list[str]:
        steps: list[str] = []

        async def batch():
            try:
                await asyncio.sleep(seconds)
                steps.append("stored")
            except asyncio.CancelledError:
                steps.append("cut")
                raise

        h = Handoff(grace_s=grace_s, on_stopped=lambda: steps.append("stopped"))
        agent = asyncio.ensure_future(h.run(batch()) if seconds is not None else asyncio.sleep(10))
        await asyncio.sleep(0.05)
        agent.cancel()
        with pytest.raises(asyncio.CancelledError):
            await agent
        if seconds is None:
            await h.stopping(None)  # the agent's own stop, with no batch
        await asyncio.sleep(0)
        return steps

    # A cut batch is cancelled first; its task sees the cancellation at its next step, after on_stopped.
    assert asyncio.run(stop_during(10, grace_s=0.1)) == ["stopped", "cut"]
    assert asyncio.run(stop_during(0.2, grace_s=5)) == ["stored", "stopped"]
    assert asyncio.run(stop_during(None, grace_s=5)) == ["stopped"]


def test_a_stop_while_the_agent_decodes_its_next_batch_lets_the_batch_in_hand_finish():
    """The ingest agent starts a batch and decodes the next one meanwhile
    (`start`); a stop that finds it there settles the batch all the same."""
    async def main():
        h, steps = Handoff(grace_s=5), []

        async def batch():
            await asyncio.sleep(0.2)
            steps.append("stored")

        async def agent():
            task = h.start(batch())
            try:
                await asyncio.sleep(10)  # decoding the next batch
            except asyncio.CancelledError:
                await h.stopping(task)
                raise

        a = asyncio.ensure_future(agent())
        await asyncio.sleep(0.05)
        in_hand = len(h.in_hand)
        settled = asyncio.ensure_future(h.settle())  # a rebalance meanwhile waits for it too
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        return in_hand, steps, await settled, h.in_hand

    in_hand, steps, settled, left = asyncio.run(main())
    assert (in_hand, steps, settled, left) == (1, ["stored"], True, set())


def test_a_stop_past_the_grace_cuts_the_started_batch():
    async def main():
        stopped, steps = [], []
        h = Handoff(grace_s=0.1, on_stopped=lambda: stopped.append(True))

        async def batch():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                steps.append("cut")
                raise

        task = h.start(batch())
        await asyncio.sleep(0.01)
        await h.stopping(task)
        await asyncio.sleep(0)
        return steps, stopped, task.cancelled()

    assert asyncio.run(main()) == (["cut"], [True], True)


def test_a_stop_says_what_it_left_for_the_next_start(caplog):
    """A stop whose commit the broker does not take (unreachable) waits the
    grace for it, then names the positions left uncommitted and the batch it
    cut; with everything committed it says so. Said once per agent."""
    class Unreachable:  # a commit the broker never answers
        async def _commit_offsets(self, offsets):
            await asyncio.sleep(3600)

    def Reachable():
        return Assigned(0, 1)

    async def stop(consumer, batch_s: float) -> Handoff:
        h = Handoff(grace_s=0.2, name="ingest")
        app = type("App", (), {"consumer": consumer()})()
        await h.commit(app, {("t", 0): 10, ("t", 1): 7})
        batch = h.start(asyncio.sleep(batch_s))
        await h.stopping(batch)
        await h.stopping(None)  # the timer's stop, say: nothing said twice
        return h

    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        asyncio.run(stop(Unreachable, 3600))
    said = [r.getMessage() for r in caplog.records if "left for the next start" in r.getMessage()]
    assert said == ["stopping ingest: left for the next start: a batch in hand, cut: it is re-read; positions durable "
                    "but not committed to the group (the broker did not take the commit): t/0@10, t/1@7"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        asyncio.run(stop(Reachable, 0))
    said = [r.getMessage() for r in caplog.records if "left for the next start" in r.getMessage()]
    assert said == ["stopping ingest: left for the next start: nothing: every durable position is committed"]


def test_no_work_starts_once_a_stop_began():
    """The join's expiry timer ticks on until Faust stops its timers, after
    the agents: a tick after the stop would be given a second grace."""
    async def main():
        h, ran = Handoff(grace_s=5), []

        async def tick():
            ran.append("tick")

        await h.run(tick())
        await h.stopping(None)
        assert await h.run(tick()) is None
        return ran

    assert asyncio.run(main()) == ["tick"]


def test_a_commit_the_group_does_not_take_is_named_and_a_later_one_clears_it(caplog):
    """Faust discards the commit of a partition revoked meanwhile: the stop
    names that position as left uncommitted, instead of saying all is
    committed. A commit of the partition taken later clears it."""
    async def stop(consumer) -> Handoff:
        h = Handoff(grace_s=1, name="ingest")
        app = type("App", (), {"consumer": consumer})()
        await h.commit(app, {("t", 0): 10, ("t", 1): 7})
        await h.settle()
        consumer.partitions.add(1)  # assigned again: its next commit is taken
        await h.commit(app, {("t", 1): 9})
        await h.stopping(None)
        return h

    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        asyncio.run(stop(Assigned(0)))
    said = [r.getMessage() for r in caplog.records]
    assert "the group did not take the commit of t/1@7 (the partition was revoked, or the broker refused it): " \
        "a member without its own durable position re-reads from the group's" in said
    assert said[-1] == "stopping ingest: left for the next start: nothing: every durable position is committed"
    caplog.clear()

    async def stop_revoked() -> None:
        h = Handoff(grace_s=1, name="ingest")
        app = type("App", (), {"consumer": Assigned(0)})()
        await h.commit(app, {("t", 0): 10, ("t", 1): 7})
        await h.stopping(None)

    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        asyncio.run(stop_revoked())
    assert caplog.records[-1].getMessage() == (
        "stopping ingest: left for the next start: positions durable but not committed to the group "
        "(the broker did not take the commit): t/1@7")
