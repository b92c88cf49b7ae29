"""A worker whose table recovery stops making progress exits, so that its
supervisor restarts it.

After a rebalance Faust's table recovery has hung, never handed changelog
records it had fetched, where no setting reaches it; a restart recovered at
once, and the worker is crash-only by design (every position it resumes from
is durable). So a stuck recovery first has its partitions sought back to what
it applied, which makes the consumer fetch them again, and the worker exits
only if that does not help either (docs/delivery.md, "A table recovery that
stops", has the measurements and the diagnosis).

Progress is the number of changelog records the recovery still expects
(Faust's `active_remaining_total`). A large changelog may take minutes to
read, but that number keeps falling while it does; only a recovery whose
count has not moved is called stuck: after `reseek_s` it is sought back
once, after `stall_s` the worker exits. Pure: recovery_task.py feeds it
every few seconds and acts on its answer.
"""

from __future__ import annotations

# EX_TEMPFAIL: "try again"; a crashed agent exits with 70 (app._crash_guard).
EXIT_RECOVERY_STALLED = 75
OK, RESEEK, EXIT = "ok", "reseek", "exit"


class RecoveryWatch:
    def __init__(self, stall_s: float):
        self.stall_s = stall_s
        # A third of the limit, at most 10 s: a recovery that reads records
        # changes its count every fetch, so 10 s unchanged is already stuck.
        self.reseek_s = min(10.0, stall_s / 3)
        self._last: tuple[int, float] | None = None  # (records still expected, since when)
        self._sought = False  # in this stuck stretch

    def verdict(self, now: float, in_recovery: bool, remaining: int) -> str:
        """EXIT once a recovery has expected the same number of records for
        `stall_s` seconds; RESEEK once, when that has lasted `reseek_s`. Any
        change (records read, or a new recovery after another rebalance with
        other highwaters) starts the clock again, and allows a new re-seek."""
        if not in_recovery or remaining <= 0:
            self._last = None
            return OK
        if self._last is None or self._last[0] != remaining:
            self._last, self._sought = (remaining, now), False
            return OK
        stuck = now - self._last[1]
        if stuck >= self.stall_s:
            return EXIT
        if stuck >= self.reseek_s and not self._sought:
            self._sought = True
            return RESEEK
        return OK

    def stuck_for(self, now: float) -> float:
        return 0.0 if self._last is None else now - self._last[1]
