-- The exact bands per model x input bucket x step: the definition is the
-- parameterized view bands_exact_view (schema/0024_bands_view.sql), which bands_view (the
-- Grafana panels) reads too. {abandoned:String} and {prefill:String}: see there.
SELECT *
FROM bands_exact_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = {abandoned:String}, prefill = {prefill:String})
ORDER BY model, input_bucket, t
