-- SLOs no longer declared stop being counted (their per-minute history
-- stays until its TTL). Written by the worker at start (store/slo_defs.py).
DELETE FROM slo_definitions WHERE slo_id IN {ids:Array(UInt64)}
