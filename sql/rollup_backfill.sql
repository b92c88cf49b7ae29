-- Backfill the per-minute rollup (schema/0003) from raw rows for a window:
-- the materialized view only sees rows inserted after it was created.
--
-- The cells are computed by the view's OWN query: `phasemeter.store.rollup`
-- reads it from the store (system.tables.as_select of generations_minute_mv)
-- and puts it in place of the marker below, so a backfilled cell is the same
-- state the view would have written and a migration that changes the view
-- changes the backfill with it. The window filter on `minute` is pushed
-- down to the raw scan (same granules as a filter on ts, EXPLAIN indexes=1).
--
-- Idempotent per cell: a (model, input_bucket, minute) that the rollup already
-- holds is skipped, so re-running a window never double-counts. start/end must
-- be whole minutes (the CLI aligns them). Not a read: run it directly against
-- the store (`phasemeter analytics backfill`), never through the worker's
-- read-only API.
INSERT INTO generations_minute
SELECT *
FROM (/* generations_minute_mv */) AS cells
WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
  AND (model, input_bucket, minute) NOT IN
      (SELECT model, input_bucket, minute FROM generations_minute
       WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)})
