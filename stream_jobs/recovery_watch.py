"""A worker whose table recovery stops making progress exits, so that its
supervisor restarts it.

Measured (the two-worker rebalance test in tests/integration/test_phases.py,
with an artificial 0-1.5 s pause inside each join batch, 10 runs): in one
run the member that took over the leaving member's partitions started
Faust's table recovery and never received a single changelog record for two
of them. It stayed not ready for over two minutes, still waiting, and
nothing more was joined (909 of 1,800 requests). Started again on the same
broker and the same store, the same worker recovered in 0.6 s and joined
all 1,800 requests once. The hang is inside Faust's recovery, where no
setting reaches it; a restart leaves it behind, and the worker is
crash-only by design (every position it resumes from is durable).

Progress is the number of changelog records the recovery still expects
(Faust's `active_remaining_total`). A large changelog may take minutes to
read, but that number keeps falling while it does; only a recovery whose
count has not moved for `stall_s` is called stuck. Pure: a task in app.py
feeds it every few seconds and exits.
"""

from __future__ import annotations

# EX_TEMPFAIL: "try again"; a crashed agent exits with 70 (app._crash_guard).
EXIT_RECOVERY_STALLED = 75


class RecoveryWatch:
    def __init__(self, stall_s: float):
        self.stall_s = stall_s
        self._last: tuple[int, float] | None = None  # (records still expected, since when)

    def stalled(self, now: float, in_recovery: bool, remaining: int) -> bool:
        """True once a recovery has expected the same number of records for
        `stall_s` seconds. Any change (records read, or a new recovery after
        another rebalance with other highwaters) starts the clock again."""
        if not in_recovery or remaining <= 0:
            self._last = None
            return False
        if self._last is None or self._last[0] != remaining:
            self._last = (remaining, now)
            return False
        return now - self._last[1] >= self.stall_s

    def stuck_for(self, now: float) -> float:
        return 0.0 if self._last is None else now - self._last[1]
