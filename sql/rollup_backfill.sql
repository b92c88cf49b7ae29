-- Backfill one tier of the rollup (schema/0003 minute, 0014 hour, 0019 3-hour, 0015 day)
-- from raw rows for a window: a materialized view only sees rows inserted
-- after it was created. {table:Identifier} is the tier's table, bound
-- server-side like every value (phasemeter.store.rollup.Tier).
--
-- The cells are computed by the tier's view's OWN query: `phasemeter.store.rollup`
-- reads it from the store (system.tables.as_select of generations_<tier>_mv)
-- and puts it in place of the marker below, so a backfilled cell is the same
-- state the view would have written and a migration that changes the view
-- changes the backfill with it. The window filter on `minute` (each tier's
-- cell start) is pushed down to the raw scan (same granules as a filter on
-- ts, EXPLAIN indexes=1).
--
-- Idempotent per cell: a (model, input_bucket, minute) that the tier already
-- holds is skipped, so re-running a window never double-counts. start/end must
-- be whole cells of the tier (the callers align them). Not a read: run it
-- directly against the store (`phasemeter analytics backfill`, the worker's
-- repair), never through the worker's read-only API.
INSERT INTO {table:Identifier}
SELECT *
FROM (/* the tier's materialized view SELECT */) AS cells
WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
  AND (model, input_bucket, minute) NOT IN
      (SELECT model, input_bucket, minute FROM {table:Identifier}
       WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)})
