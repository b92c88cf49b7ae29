-- The exact latency per model x pool x input bucket x step, with the KV
-- transfer's percentiles (`phasemeter latency --by prefill_replica|decode_replica`):
-- the definition is the parameterized view latency_pool_view (schema/0027_pd_columns.sql).
SELECT *
FROM latency_pool_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, by = {by:String})
ORDER BY model, pool, input_bucket, t
