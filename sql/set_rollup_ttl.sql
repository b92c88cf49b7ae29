-- Retention of the rollup (PHASEMETER_ROLLUP_TTL_DAYS), applied by
-- `phasemeter migrate` to every tier ({table:Identifier}: generations_minute,
-- _hour, _hour3, _day), independent of the raw table's: the tiers keep what the
-- minute tier keeps. Metadata only: run with materialize_ttl_after_modify=0.
ALTER TABLE {table:Identifier} MODIFY TTL toDateTime(minute) + toIntervalDay({days:UInt32})
