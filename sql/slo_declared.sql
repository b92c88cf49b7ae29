-- Every declared SLO row (one per name): what the worker's registration
-- compares its SLO file with (store/slo_defs.py).
SELECT slo_id, name, target, registered_at
FROM slo_definitions
ORDER BY slo_id, name
