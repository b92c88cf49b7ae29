"""When a worker may process what it fetched: partitions assigned and the join table recovered.

Records processed before Faust's end-of-recovery seek to the committed offsets left its offset tracking
committing past records it never delivered. Holding batches until then removed the loss; the re-fetched copies
are skipped as stored or duplicate (docs/phases.md, "A Faust hazard found on the way").
"""

from __future__ import annotations

import asyncio


def is_ready(app) -> bool:
    # Faust sets `rebalancing` in its revoke callback, before the revoke signal settles the batch in hand, and
    # clears it once the new assignment is recovered. In between, the old assignment still looks current: a
    # batch would process partitions already handed over (suspected cause of 5 requests joined twice in a run).
    return (not app.unassigned and not app.in_recovery and not app.rebalancing
            and app.tables.recovery.completed.is_set())


async def until_ready(app) -> None:
    while not is_ready(app):
        await asyncio.sleep(0.05)
