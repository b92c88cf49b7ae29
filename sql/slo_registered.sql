-- The declared SLOs the store counts per minute, and since when (the first
-- registration of each slo_id): the rollup path answers from the first minute
-- its counts are complete, phasemeter_slo_covered_from_v1 (schema/0026), as
-- slo_view decides for the Grafana panel.
SELECT slo_id, any(name) AS name, min(registered_at) AS registered_at,
       phasemeter_slo_covered_from_v1(registered_at) AS covered_from  -- the alias: the first registration
FROM slo_definitions
GROUP BY slo_id
ORDER BY slo_id
