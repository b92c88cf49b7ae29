-- SLO attainment counts per model × input bucket × step from the per-minute
-- counts of a declared SLO, the rollup twin of slo_exact.sql (same columns,
-- same counts for whole minutes once the SLO was registered before the
-- window; phasemeter/analytics/slo.py checks). The definition is the
-- parameterized view slo_rollup_view (schema/0018_slo_rollup_view.sql), which
-- the Grafana SLO panel reads too.
SELECT *
FROM slo_rollup_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     slo_id = {slo_id:UInt64}, models = {models:Array(String)}, buckets = {buckets:Array(String)})
ORDER BY model, input_bucket, t
