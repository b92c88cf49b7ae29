"""A worker whose table recovery stops making progress exits, so that its supervisor restarts it.

Faust's table recovery has hung after a rebalance, beyond any setting's reach; a restart recovered at once, and
every position the worker resumes from is durable. A stuck recovery's partitions are first sought back, and the
worker exits only if that does not help (docs/delivery.md, "A table recovery that stops"). Progress is the
number of changelog records still expected, which keeps falling while even a large changelog is read. Pure:
recovery_task.py feeds it every few seconds and acts on its answer.
"""

from __future__ import annotations

# EX_TEMPFAIL: "try again"; a crashed agent exits with 70 (app._crash_guard).
EXIT_RECOVERY_STALLED = 75
OK, RESEEK, EXIT = "ok", "reseek", "exit"


class RecoveryWatch:
    def __init__(self, stall_s: float):
        self.stall_s = stall_s
        # At most 10 s: a recovery reading records changes its count every fetch, so 10 s unchanged is stuck.
        self.reseek_s = min(10.0, stall_s / 3)
        self._last: tuple[int, float] | None = None  # (records still expected, since when)
        self._sought = False  # in this stuck stretch

    def verdict(self, now: float, in_recovery: bool, remaining: int) -> str:
        """EXIT once a recovery has expected the same number of records for `stall_s` seconds; RESEEK once,
        when that has lasted `reseek_s`. Any change (records read, or a new recovery after another rebalance)
        starts the clock again and allows a new re-seek."""
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
