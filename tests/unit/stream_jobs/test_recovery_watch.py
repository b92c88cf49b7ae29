"""The recovery watchdog's rule: stuck = the records a recovery still expects
have not changed; re-seek once after reseek_s, exit after stall_s
(stream_jobs/recovery_watch.py)."""

from phasemeter.stream_jobs.recovery_watch import EXIT, OK, RESEEK, RecoveryWatch


class Stalled(RecoveryWatch):
    """The exit question alone, as the first tests ask it."""

    def stalled(self, now, in_recovery, remaining):
        return self.verdict(now, in_recovery, remaining) == EXIT


def test_a_recovery_that_expects_the_same_records_for_stall_s_is_stuck():
    w = Stalled(stall_s=60)
    assert not w.stalled(0, True, 2)
    assert not w.stalled(59.9, True, 2)
    assert w.stalled(60, True, 2) and w.stuck_for(61) == 61


def test_progress_or_a_new_recovery_restarts_the_clock():
    w = Stalled(stall_s=60)
    w.stalled(0, True, 500)
    assert not w.stalled(50, True, 400)   # records read: progress
    assert not w.stalled(100, True, 400)  # 50 s since the last progress
    assert not w.stalled(105, True, 900)  # another rebalance: new highwaters
    assert not w.stalled(160, True, 900)
    assert w.stalled(165, True, 900)


def test_no_recovery_or_nothing_left_is_never_stuck():
    w = Stalled(stall_s=1)
    w.stalled(0, True, 3)
    assert not w.stalled(10, False, 3)   # recovery over (ready, or not started)
    assert not w.stalled(20, True, 3)    # a new one starts its own clock
    assert not w.stalled(30, True, 0)
    assert not w.stalled(40, False, 0) and w.stuck_for(40) == 0.0


def test_a_stuck_recovery_is_sought_back_once_then_exits():
    w = RecoveryWatch(stall_s=30)
    assert w.reseek_s == 10
    assert [w.verdict(t, True, 7) for t in (0, 5, 10, 15, 29.9, 30)] == [OK, OK, RESEEK, OK, OK, EXIT]


def test_records_read_after_a_reseek_clear_it_and_a_new_stall_is_sought_again():
    w = RecoveryWatch(stall_s=30)
    assert [w.verdict(t, True, 7) for t in (0, 10)] == [OK, RESEEK]
    assert w.verdict(12, True, 3) == OK           # the re-seek brought records
    assert [w.verdict(t, True, 3) for t in (22, 30, 42)] == [RESEEK, OK, EXIT]
    assert RecoveryWatch(stall_s=8).reseek_s == 8 / 3  # short limits (tests): a third of it
