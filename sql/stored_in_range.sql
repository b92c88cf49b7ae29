-- What one partition's records in [lo, hi] already left in the store, per
-- table: after a crash between an insert and the progress row, the batch is
-- re-read and each row and dead letter already there is skipped on its own
-- (an insert can land part by part, e.g. one part per day partition; an
-- envelope's rows can straddle two parts). The rows' cells are returned too:
-- their insert may have stopped before the rollup view got its block. So are
-- the duplicate dead letters' details, one row each: a request_id whose every
-- copy in a record was dead-lettered as a duplicate was decided, whatever the
-- re-read batch's time range lets the duplicate check see.
SELECT 'row' AS kind, src_offset, request_id, model, input_bucket,
       toStartOfMinute(toDateTime(ts, 'UTC')) AS minute
FROM generations
WHERE src_topic = {topic:String} AND src_partition = {partition:UInt16}
  AND src_offset BETWEEN {lo:UInt64} AND {hi:UInt64}
UNION ALL
SELECT DISTINCT 'dead' AS kind, src_offset, '' AS request_id, '' AS model, '' AS input_bucket,
       toDateTime(0, 'UTC') AS minute
FROM dead_letters
WHERE src_topic = {topic:String} AND src_partition = {partition:UInt16}
  AND src_offset BETWEEN {lo:UInt64} AND {hi:UInt64}
UNION ALL
SELECT 'duplicate' AS kind, src_offset, detail AS request_id, '' AS model, '' AS input_bucket,
       toDateTime(0, 'UTC') AS minute
FROM dead_letters
WHERE src_topic = {topic:String} AND src_partition = {partition:UInt16}
  AND src_offset BETWEEN {lo:UInt64} AND {hi:UInt64} AND reason = {duplicate:String}
