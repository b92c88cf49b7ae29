-- The exact latency per model x input bucket x step, of the stored input
-- bucket: the definition is the parameterized view latency_exact_buckets_view
-- (schema/0028_bucket_views_and_slo_view.sql; edges = []: the stored bucket), which
-- latency_exact_view and latency_view (the Grafana panels) and the re-bucketed
-- latencies (sql/latency_rebucket.sql) read too; read directly, as
-- sql/bands_exact.sql says why. {abandoned:String}: see schema/0025_latency_view.sql.
SELECT *
FROM latency_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'))
ORDER BY model, input_bucket, t
