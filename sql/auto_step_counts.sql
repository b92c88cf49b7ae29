-- Generations per model × input bucket × cell of {grain:UInt32} seconds over
-- the window, from the minute tier (small columns only, no sketch states): what
-- the auto step weighs (analytics/paths.sample_step, docs/live.md). grain is
-- 60, 3600 or 86400, so cells of the ladder's coarser steps are unions of these.
SELECT model, input_bucket,
       toUnixTimestamp(toStartOfInterval(minute, toIntervalSecond({grain:UInt32}))) AS t,
       sum(n) AS n
FROM generations_minute
WHERE minute >= toStartOfMinute({start:DateTime64(3)}) AND minute < {end:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
GROUP BY model, input_bucket, t
