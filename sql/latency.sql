-- The exact latency per model x input bucket x step: the definition is the
-- parameterized view latency_exact_view (schema/0025_latency_view.sql), which latency_view (the
-- Grafana panels) reads too. {abandoned:String}: see there.
SELECT *
FROM latency_exact_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String})
ORDER BY model, input_bucket, t
