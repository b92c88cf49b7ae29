-- SLO rows no longer declared (by id, name and target) are removed; an id left
-- without rows stops being counted (its per-minute history stays until its
-- TTL). Written by the worker at start (store/slo_defs.py).
DELETE FROM slo_definitions WHERE (slo_id, name, target) IN {rows:Array(Tuple(UInt64, String, Float64))}
