-- SLO attainment counts per model × input bucket × step from the per-minute
-- counts of a declared SLO (schema/0013_slo_minute.sql), the rollup twin of
-- slo_exact.sql: same columns, same counts for whole minutes once the SLO
-- was registered before the window (phasemeter/analytics/slo.py checks).
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
ORDER BY model, input_bucket, t
