-- Percentile bands (exact) with input buckets recomputed at query time from the
-- raw input_tokens (`--buckets`): the definition is the parameterized view
-- bands_exact_buckets_view (schema/0028_bucket_views_and_slo_view.sql), which the stored
-- bucket's bands (bands_exact_view) read too. {edges:Array(UInt32)} start at 0
-- and ascend, {labels:Array(String)} name their intervals; `buckets` filters on
-- the new labels. {abandoned:String} and {prefill:String}: see schema/0024.
SELECT *
FROM bands_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, prefill = {prefill:String},
     edges = {edges:Array(UInt32)}, labels = {labels:Array(String)})
ORDER BY model, input_bucket, t
