-- The declared SLOs the store counts per minute, and since when (the first
-- registration of each slo_id): the rollup path answers from the first whole
-- minute after it.
SELECT slo_id, any(name) AS name, min(registered_at) AS registered_at
FROM slo_definitions
GROUP BY slo_id
ORDER BY slo_id
