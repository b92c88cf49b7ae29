"""Faust's fixed waits at start and stop, left out where they wait for nothing.

A worker is started and stopped on every deploy, every crash restart and
every hand-off of partitions, and each of those waited about 3 s that did
no work (measured, `phasemeter worker` on a local broker, 2 cores, idle):

* at start, Faust's TableManager sleeps 1 s before it finalises the tables,
  in case an app declares one late; `create_app` declares the join's table
  before the worker starts, and a table added afterwards still raises
  (Faust's own check), so nothing can miss the cut;
* at stop, mode's Worker waits up to 1 s for tasks that are still running,
  and then runs the loop for another full second before closing it. Our
  only long-lived task (the recovery watch) is cancelled on shutdown
  (app.py), and by then the consumer has committed, the producer flushed
  and every store write returned: the loop keeps a short grace for the
  callbacks that closing transports schedule, not a second.

Both overrides replace private steps of pinned versions (faust-streaming
0.15.3, mode-streaming 0.7.1); tests/unit/stream_jobs/test_lifecycle.py
fails when an upgrade changes what they replace.
"""

from __future__ import annotations

import asyncio

import faust
from faust.tables import TableManager as _FaustTableManager

# Long enough for the callbacks a closing transport schedules with call_soon
# (a few loop iterations), far below mode's 1 s.
STOP_GRACE_S = 0.1


class TableManager(_FaustTableManager):
    async def on_start(self) -> None:
        # Faust's on_start, without its first `await self.sleep(1.0)`.
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class Worker(faust.Worker):
    async def _sentinel_task(self) -> None:
        await asyncio.sleep(STOP_GRACE_S)
