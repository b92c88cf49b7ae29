-- The throughput bands on the rollup path: the definition is the parameterized
-- view bands_rollup_view (schema/0007_bands_rollup_view.sql), which the Grafana panels
-- read too, so a dashboard number cannot disagree with the CLI.
SELECT *
FROM bands_rollup_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)})
ORDER BY model, input_bucket, t
