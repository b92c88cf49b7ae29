-- Retention of raw generations (PHASEMETER_RAW_TTL_DAYS), applied by
-- `phasemeter migrate`. A metadata change: run with
-- materialize_ttl_after_modify=0 so old parts expire at their next merge
-- instead of being rewritten now.
ALTER TABLE generations MODIFY TTL toDateTime(ts) + toIntervalDay({days:UInt32})
