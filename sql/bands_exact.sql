-- The exact bands per model x input bucket x step, of the stored input bucket:
-- the definition is the parameterized view bands_exact_buckets_view
-- (schema/0028_bucket_views_and_slo_view.sql; edges = []: the stored bucket), which
-- bands_exact_view and bands_view (the Grafana panels) and the re-bucketed
-- bands (sql/bands_rebucket.sql) read too. Read here directly, not through
-- bands_exact_view: each parameterized view a query passes through costs its
-- planning again (measured ~15-25 ms a level on chDB, docs/analytics.md).
-- {abandoned:String} and {prefill:String}: see schema/0024_bands_view.sql.
SELECT *
FROM bands_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, prefill = {prefill:String},
     edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'))
ORDER BY model, input_bucket, t
