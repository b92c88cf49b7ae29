-- Drop a rollup tier's states of cells found unequal to raw, before
-- rollup_backfill.sql rebuilds exactly those cells from raw (it fills only
-- cells the tier does not hold). {table:Identifier}: generations_minute,
-- _hour or _day (phasemeter.store.rollup.Tier). Not a read: the worker and
-- `analytics backfill` run it directly.
DELETE FROM {table:Identifier}
WHERE (model, input_bucket, minute) IN {cells:Array(Tuple(String, String, DateTime))}
