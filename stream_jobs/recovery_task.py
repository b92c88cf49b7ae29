"""The Faust side of the recovery watch (recovery_watch.py holds its rule): a task that feeds it how many changelog
records the join table's recovery still expects, and seeks back or exits as it says. A plain task started at
the first assignment, not a Faust timer: Faust starts timers only after the first recovery, which can hang too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from .recovery_watch import EXIT, EXIT_RECOVERY_STALLED, RESEEK, RecoveryWatch

log = logging.getLogger("phasemeter.worker")


def install(app, stall_s: float) -> None:
    watch = RecoveryWatch(stall_s)
    watching: list[asyncio.Future] = []

    async def watch_recovery():
        while not app.should_stop:
            await asyncio.sleep(min(5.0, stall_s / 2))
            recovery = app.tables.recovery
            left = {tp: n for tp, n in recovery.active_remaining().items() if n > 0}
            expected, now = sum(left.values()), time.monotonic()
            verdict = watch.verdict(now, bool(recovery.in_recovery), expected)
            if verdict == RESEEK:
                log.warning("table recovery has read no changelog record for %.0f s and still expects %d; "
                            "seeking its partitions back to what it applied (%s)",
                            watch.stuck_for(now), expected,
                            await where_recovery_stands(app, recovery, left))
                await reseek(app, recovery, left)
            elif verdict == EXIT:
                log.critical("table recovery has read no changelog record for %.0f s and still expects %d on %s; "
                             "exiting with %d so a supervisor restarts the worker (%s)",
                             watch.stuck_for(now), expected,
                             sorted(f"{tp.topic}/{tp.partition}" for tp in left), EXIT_RECOVERY_STALLED,
                             await where_recovery_stands(app, recovery, left))
                logging.shutdown()
                os._exit(EXIT_RECOVERY_STALLED)

    @app.on_partitions_assigned.connect
    async def _start_watching(app, assigned, **kwargs):  # noqa: ARG001
        if not watching:
            watching.append(asyncio.ensure_future(watch_recovery()))

    @app.on_before_shutdown.connect
    async def _stop_watching(app, **kwargs):  # noqa: ARG001
        # Not left for the worker's stop to wait a second for (faust_adapter.Worker).
        for task in watching:
            task.cancel()


async def reseek(app, recovery, left) -> None:
    """Fetch the stuck changelog partitions again from the last offset the recovery applied (-1: none, so 0).
    Faust's own offset check skips a record already applied, so reading one twice is harmless."""
    for tp in left:
        try:
            await app.consumer.seek(tp, max(recovery.active_offsets.get(tp) or 0, 0))
        except Exception as exc:  # e.g. revoked meanwhile: the watch goes on, and exits if still stuck
            log.warning("seeking %s/%d back failed (%s)", tp.topic, tp.partition, exc)


async def where_recovery_stands(app, recovery, left) -> str:
    """Per stuck partition: the offset applied, the highwater awaited and the fetch position. A position at the
    highwater means records fetched but never handed over; at the applied offset, never fetched."""
    parts = []
    for tp in sorted(left):
        try:
            position = await app.consumer.position(tp)
        except Exception as exc:  # a diagnostic: never the reason the exit fails
            position = f"? ({exc.__class__.__name__})"
        parts.append(f"{tp.topic}/{tp.partition}: applied {recovery.active_offsets.get(tp)}, "
                     f"highwater {recovery.active_highwaters.get(tp)}, fetch position {position}")
    return "; ".join(parts)
