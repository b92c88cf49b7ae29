-- Retention of the per-minute SLO counts (schema/0013): the rollup's
-- (PHASEMETER_ROLLUP_TTL_DAYS), applied by `phasemeter migrate` with it.
-- Metadata only: run with materialize_ttl_after_modify=0.
ALTER TABLE slo_minute MODIFY TTL toDateTime(minute) + toIntervalDay({days:UInt32})
