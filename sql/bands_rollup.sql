-- The throughput bands on the rollup path: the definition is the parameterized
-- view bands_rollup_view (schema/0007_bands_rollup_view.sql), which the Grafana panels
-- read too, so a dashboard number cannot disagree with the CLI.
-- hour_*/hour3_*/day_*: the part each coarser tier answers (schema/0020_bands_rollup_hour3.sql;
-- phasemeter.analytics.paths.tier_plan).
SELECT *
FROM bands_rollup_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = {hour_from:DateTime64(3)}, hour_to = {hour_to:DateTime64(3)},
     hour3_from = {hour3_from:DateTime64(3)}, hour3_to = {hour3_to:DateTime64(3)},
     day_from = {day_from:DateTime64(3)}, day_to = {day_to:DateTime64(3)})
ORDER BY model, input_bucket, t
