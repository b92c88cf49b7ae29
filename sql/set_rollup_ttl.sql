-- Retention of the per-minute rollup (PHASEMETER_ROLLUP_TTL_DAYS), applied by
-- `phasemeter migrate`, independent of the raw table's. Metadata only: run
-- with materialize_ttl_after_modify=0.
ALTER TABLE generations_minute MODIFY TTL toDateTime(minute) + toIntervalDay({days:UInt32})
