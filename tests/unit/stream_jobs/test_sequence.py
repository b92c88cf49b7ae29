"""The sequencer admits each partition's records strictly in offset order
from the position the store recorded, and asks for a seek on any gap."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from phasemeter.stream_jobs.sequence import Sequencer


def ev(partition: int, offset: int, topic: str = "t"):
    return SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset))


def offsets(events):
    return [(e.message.partition, e.message.offset) for e in events]


def test_in_order_records_pass_and_advance():
    s = Sequencer()
    s.load({("t", 0): 5, ("t", 1): 0})
    out = s.admit([ev(0, 5), ev(1, 0), ev(0, 6), ev(1, 1)], now=0)
    assert offsets(out.events) == [(0, 5), (1, 0), (0, 6), (1, 1)]
    assert (out.stale, out.gapped, out.seek) == (0, 0, {})
    assert s.position({("t", 0), ("t", 1)}) == {("t", 0): 7, ("t", 1): 2}


def test_records_below_the_position_are_skipped_as_already_processed():
    s = Sequencer()
    s.load({("t", 0): 10})
    out = s.admit([ev(0, 8), ev(0, 9), ev(0, 10)], now=0)
    assert offsets(out.events) == [(0, 10)] and out.stale == 2


def test_a_head_gap_is_never_processed_and_asks_for_a_seek():
    # The lost-head case: Faust delivered 3231.. of a partition whose store
    # position is 0. Nothing may be processed past the gap.
    s = Sequencer()
    s.load({("t", 1): 0, ("t", 2): 0})
    out = s.admit([ev(1, 3231), ev(2, 0), ev(1, 3232)], now=0)
    assert offsets(out.events) == [(2, 0)]
    assert out.gapped == 2 and out.seek == {("t", 1): 0}
    assert s.position({("t", 1)}) == {("t", 1): 0}


def test_records_after_a_gap_in_the_same_batch_wait_even_if_the_gap_closes_later_in_it():
    s = Sequencer()
    s.load({("t", 0): 0})
    out = s.admit([ev(0, 0), ev(0, 2), ev(0, 1)], now=0)
    assert offsets(out.events) == [(0, 0)] and out.seek == {("t", 0): 1}


def test_buffered_records_from_before_the_seek_do_not_seek_again_until_the_timeout():
    s = Sequencer(reseek_after_s=10.0)
    s.load({("t", 0): 0})
    assert s.admit([ev(0, 50)], now=0).seek == {("t", 0): 0}
    assert s.admit([ev(0, 51)], now=5).seek == {}            # still in flight
    out = s.admit([ev(0, 0), ev(0, 1)], now=6)               # the re-read arrives
    assert offsets(out.events) == [(0, 0), (0, 1)]
    assert s.admit([ev(0, 52)], now=7).seek == {("t", 0): 2}  # a new gap seeks at once


def test_a_gap_that_never_closes_is_reported_stuck_not_skipped():
    s = Sequencer(reseek_after_s=1.0, max_seeks=3)
    s.load({("t", 0): 4})
    seeks = [s.admit([ev(0, 9)], now=t).seek for t in (0, 2, 4)]
    assert seeks == [{("t", 0): 4}] * 3
    out = s.admit([ev(0, 9)], now=6)
    assert out.stuck == {("t", 0): (4, 9)} and out.events == [] and out.seek == {}
    s.jump(("t", 0), 9)  # only once the broker confirmed 4..8 are gone
    assert offsets(s.admit([ev(0, 9)], now=7).events) == [(0, 9)]


def test_forget_clears_positions_after_a_rebalance():
    s = Sequencer()
    s.load({("t", 0): 3})
    s.forget()
    assert s.unknown([ev(0, 3), ev(1, 0, topic="u")]) == {("t", 0), ("u", 1)}


@settings(max_examples=200)
@given(n=st.integers(1, 60), chunks=st.lists(st.tuples(st.integers(0, 59), st.integers(1, 20)), max_size=30),
       start=st.integers(0, 10))
def test_any_delivery_order_processes_each_offset_once_in_order(n, chunks, start):
    """Whatever ranges the consumer delivers (re-reads, jumps ahead, repeats),
    the admitted offsets are exactly start, start+1, ... with no repeats."""
    s = Sequencer(reseek_after_s=0.0)
    s.load({("t", 0): start})
    admitted = []
    now = 0.0
    for lo, length in chunks + [(start, n + 60)]:  # finally a full re-read from the position
        now += 1
        out = s.admit([ev(0, o) for o in range(lo, lo + length)], now=now)
        admitted += [e.message.offset for e in out.events]
    assert admitted == list(range(start, start + len(admitted)))


def test_an_overdue_seek_is_repeated_even_when_nothing_arrives():
    s = Sequencer(reseek_after_s=5.0)
    s.load({("t", 0): 10})
    assert s.admit([ev(0, 40)], now=0).seek == {("t", 0): 10}
    assert s.overdue(now=3) == {}
    assert s.overdue(now=6) == {("t", 0): 10}
    assert s.overdue(now=7) == {}            # its clock restarted
    s.admit([ev(0, 10)], now=8)              # the re-read arrived
    assert s.overdue(now=100) == {}


def test_a_partition_silent_behind_its_end_is_sought_back_once_quiet():
    # Faust dropped the rest of a fetch (a rebalance mid-fetch): records are
    # in the log past the position and none comes; no gap is ever seen.
    s = Sequencer(reseek_after_s=5.0)
    s.load({("t", 0): 3, ("t", 1): 7})
    s.admit([ev(0, 3), ev(1, 7)], now=100)          # positions 4 and 8
    ends = {("t", 0): 250, ("t", 1): 8, ("t", 2): 40}  # t/1 caught up; t/2 never loaded
    # Quiet long before the end moved: behind counts from when it is seen so.
    assert s.behind(ends, now=200) == {}
    assert s.behind(ends, now=204.9) == {}
    assert s.behind(ends, now=205) == {("t", 0): 4}
    assert s.behind(ends, now=206) == {}             # now a seek under way, not sought twice
    assert s.overdue(now=209) == {}
    assert s.overdue(now=210) == {("t", 0): 4}       # ... and repeated like any seek
    out = s.admit([ev(0, 4), ev(0, 5)], now=211)     # the re-read arrives
    assert offsets(out.events) == [(0, 4), (0, 5)] and s.overdue(now=300) == {}
    assert s.behind(ends, now=212) == {}
    assert s.behind(ends, now=217) == {("t", 0): 6}


def test_records_arriving_or_the_position_moving_restart_the_count():
    s = Sequencer(reseek_after_s=5.0)
    s.load({("t", 0): 0})
    s.admit([ev(0, 0)], now=0)
    assert s.behind({("t", 0): 10}, now=1) == {}     # behind from 1
    s.admit([ev(0, 5)], now=3)                       # a record came (a gap: a seek under way)
    s.forget_seek(("t", 0))
    assert s.behind({("t", 0): 10}, now=6) == {}     # counted again from 6, not 1
    assert s.behind({("t", 0): 10}, now=10.9) == {}
    assert s.behind({("t", 0): 10}, now=11) == {("t", 0): 1}


def test_a_partition_receiving_records_is_not_behind_even_past_its_position():
    s = Sequencer(reseek_after_s=5.0)
    s.load({("t", 0): 0})
    for t in range(0, 30, 2):  # a slow but steady stream: the end stays ahead
        s.admit([ev(0, t // 2)], now=t)
        assert s.behind({("t", 0): 1_000}, now=t + 1) == {}
    s.forget()  # a rebalance: positions are reloaded, nothing is sought blindly
    assert s.behind({("t", 0): 1_000}, now=1_000) == {}


def test_a_noted_partition_no_record_came_for_is_sought_back_from_its_durable_position():
    # Owned since the assignment, never delivered: no position is loaded (the
    # agent loads its own), but the idle check noted the durable one.
    s = Sequencer(reseek_after_s=5.0)
    assert s.unheard({("t", 0), ("t", 1)}) == {("t", 0), ("t", 1)}
    s.note({("t", 0): 18})
    assert s.unheard({("t", 0), ("t", 1)}) == {("t", 1)}
    assert s.position({("t", 0)}) == {} and s.owed({("t", 0), ("t", 1)}) == {("t", 0): 18}
    assert s.behind({("t", 0): 21}, now=0) == {}
    assert s.behind({("t", 0): 21}, now=5) == {("t", 0): 18}
    assert s.overdue(now=10) == {("t", 0): 18}       # a seek like any other, repeated
    s.load({("t", 0): 18})                           # the re-read came: the agent loads its own
    out = s.admit([ev(0, 18), ev(0, 19), ev(0, 20)], now=11)
    assert offsets(out.events) == [(0, 18), (0, 19), (0, 20)]
    assert s.overdue(now=100) == {} and s.behind({("t", 0): 21}, now=100) == {}


def test_a_note_never_moves_a_loaded_position_and_a_rebalance_forgets_it():
    s = Sequencer(reseek_after_s=5.0)
    s.load({("t", 0): 30})
    s.note({("t", 0): 12, ("t", 1): 4})               # read before the agent's batch moved t/0 on
    assert s.owed({("t", 0), ("t", 1)}) == {("t", 0): 30, ("t", 1): 4}
    s.forget()
    assert s.owed({("t", 0), ("t", 1)}) == {} and s.unheard({("t", 1)}) == {("t", 1)}
    assert s.behind({("t", 1): 40}, now=0) == {} and s.behind({("t", 1): 40}, now=50) == {}
