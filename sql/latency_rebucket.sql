-- Latency percentiles (exact) with input buckets recomputed at query time from
-- the raw input_tokens (`--buckets`): the definition is the parameterized view
-- latency_exact_buckets_view (schema/0028_bucket_views_and_slo_view.sql), which the stored
-- bucket's latencies (latency_exact_view) read too. {edges}, {labels} and
-- `buckets`: as sql/bands_rebucket.sql; {abandoned:String}: see schema/0025.
SELECT *
FROM latency_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, edges = {edges:Array(UInt32)}, labels = {labels:Array(String)})
ORDER BY model, input_bucket, t
