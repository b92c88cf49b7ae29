-- Drop the rollup's states of cells found unequal to raw, before
-- rollup_backfill.sql rebuilds exactly those cells from raw (it fills only
-- cells the rollup does not hold). Not a read: the worker runs it directly.
DELETE FROM generations_minute
WHERE (model, input_bucket, minute) IN {cells:Array(Tuple(String, String, DateTime))}
