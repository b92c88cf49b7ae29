-- Generations per model × input bucket × cell of {grain:UInt32} seconds over
-- the window, from the rollup tier whose grain divides it ({table:Identifier}:
-- minute, hour or day; its small columns only, no sketch states): what the auto step
-- weighs (analytics/paths.sample_step, docs/live.md). The cells of the
-- ladder's coarser steps are unions of these.
SELECT model, input_bucket,
       toUnixTimestamp(toStartOfInterval(minute, toIntervalSecond({grain:UInt32}))) AS t,
       sum(n) AS n
FROM {table:Identifier}
WHERE minute >= toStartOfInterval({start:DateTime64(3)}, toIntervalSecond({grain:UInt32}))
  AND minute < {end:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
GROUP BY model, input_bucket, t
