-- The exact bands per model x pool x input bucket x step (`query bands --by
-- prefill_replica|decode_replica`): the definition is the parameterized view
-- bands_pool_view (schema/0027_pd_columns.sql). {by:String} names the pool column.
SELECT *
FROM bands_pool_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, prefill = {prefill:String}, by = {by:String})
ORDER BY model, pool, input_bucket, t
