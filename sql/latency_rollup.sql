-- The latency percentiles on the rollup path: the definition is the parameterized
-- view latency_rollup_view (schema/0008_latency_rollup_view.sql), which the Grafana panels
-- read too, so a dashboard number cannot disagree with the CLI.
SELECT *
FROM latency_rollup_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)})
ORDER BY model, input_bucket, t
