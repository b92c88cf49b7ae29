"""When a worker may process what it fetched: partitions assigned and the
join table recovered from its changelog.

Records processed before Faust's end-of-recovery seek to the committed
offsets left its offset tracking committing past records it never
delivered. Holding such a batch until recovery has ended (and the seek
happened) removed the loss; the re-fetched copies are skipped as already
stored (ingest) or as duplicates (join). docs/phases.md ("A Faust hazard
found on the way") has the runs.
"""

from __future__ import annotations

import asyncio


def is_ready(app) -> bool:
    # `rebalancing` is set by Faust's revoke callback, before the revoke
    # signal (where the batch in hand is settled), and cleared once the new
    # assignment is recovered. Between the two the old assignment still
    # reads as current: a batch yielded in that window would process
    # partitions already handed over, after their new owner read the
    # changelog (suspected cause of 5 requests joined twice in one run).
    return (not app.unassigned and not app.in_recovery and not app.rebalancing
            and app.tables.recovery.completed.is_set())


async def until_ready(app) -> None:
    while not is_ready(app):
        await asyncio.sleep(0.05)
