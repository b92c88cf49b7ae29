"""The recovery watchdog's rule: stuck = the records a recovery still expects
have not changed for stall_s (stream_jobs/recovery_watch.py)."""

from phasemeter.stream_jobs.recovery_watch import RecoveryWatch


def test_a_recovery_that_expects_the_same_records_for_stall_s_is_stuck():
    w = RecoveryWatch(stall_s=60)
    assert not w.stalled(0, True, 2)
    assert not w.stalled(59.9, True, 2)
    assert w.stalled(60, True, 2) and w.stuck_for(61) == 61


def test_progress_or_a_new_recovery_restarts_the_clock():
    w = RecoveryWatch(stall_s=60)
    w.stalled(0, True, 500)
    assert not w.stalled(50, True, 400)   # records read: progress
    assert not w.stalled(100, True, 400)  # 50 s since the last progress
    assert not w.stalled(105, True, 900)  # another rebalance: new highwaters
    assert not w.stalled(160, True, 900)
    assert w.stalled(165, True, 900)


def test_no_recovery_or_nothing_left_is_never_stuck():
    w = RecoveryWatch(stall_s=1)
    w.stalled(0, True, 3)
    assert not w.stalled(10, False, 3)   # recovery over (ready, or not started)
    assert not w.stalled(20, True, 3)    # a new one starts its own clock
    assert not w.stalled(30, True, 0)
    assert not w.stalled(40, False, 0) and w.stuck_for(40) == 0.0
