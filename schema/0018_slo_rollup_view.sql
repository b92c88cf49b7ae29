-- The rollup path of SLO attainment as a parameterized view, so that the CLI
-- and the Grafana SLO panel read one definition, as bands_rollup_view (0007)
-- does for the bands. Its body is sql/slo_rollup.sql's statement: the counts
-- of one declared SLO (slo_minute, 0013) per model × input bucket × step.
-- Called as
--   slo_rollup_view(start = ..., end = ..., step_s = ..., slo_id = ..., models = [...], buckets = [...])
-- with [start, end) on whole minutes and step_s a multiple of 60. The
-- dashboard finds slo_id by name in slo_definitions (a scalar subquery as
-- the argument); `counts` is SLO_COUNTS (n, met, failed, then the misses),
-- so attainment = counts[2] / counts[1] over the summed counts.
CREATE VIEW IF NOT EXISTS slo_rollup_view AS
SELECT
    toStartOfInterval(minute, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
    model,
    input_bucket,
    sumForEachMerge(counts) AS counts
FROM slo_minute
WHERE slo_id = {slo_id:UInt64}
  AND minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
GROUP BY t, model, input_bucket
ORDER BY model, input_bucket, t;
