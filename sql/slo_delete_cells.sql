-- Drop the SLO counts of cells found unequal to raw (slo_mismatches.sql),
-- before slo_backfill.sql rebuilds exactly those cells. Not a read.
DELETE FROM slo_minute
WHERE (slo_id, model, input_bucket, minute) IN {cells:Array(Tuple(UInt64, String, String, DateTime))}
