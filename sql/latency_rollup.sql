-- The latency percentiles on the rollup path: the definition is the parameterized
-- view latency_rollup_view (schema/0008_latency_rollup_view.sql), which the Grafana panels
-- read too, so a dashboard number cannot disagree with the CLI.
-- hour_*/hour3_*/day_*: the part each coarser tier answers (schema/0021_latency_rollup_hour3.sql;
-- phasemeter.analytics.paths.tier_plan).
SELECT *
FROM latency_rollup_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = {hour_from:DateTime64(3)}, hour_to = {hour_to:DateTime64(3)},
     hour3_from = {hour3_from:DateTime64(3)}, hour3_to = {hour3_to:DateTime64(3)},
     day_from = {day_from:DateTime64(3)}, day_to = {day_to:DateTime64(3)})
ORDER BY model, input_bucket, t
-- A day of minute cells is a read under the size from which ClickHouse splits a
-- read across threads (merge_tree_min_bytes_for_concurrent_read, 24 MiB), so it
-- ran on one core. Each cell costs tens of microseconds to merge and finalize
-- (its sketches), so even such a read is worth every core: in-process over 100M
-- rows, 1 day at 1-minute steps took 0.66-0.84x the time for the bands and 0.65x
-- for the latencies (docs/performance/queries.md).
SETTINGS merge_tree_min_rows_for_concurrent_read = 8192, merge_tree_min_bytes_for_concurrent_read = 1048576
