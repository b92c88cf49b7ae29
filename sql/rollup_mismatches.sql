-- Cells (model x bucket x cell) where one tier of the rollup does not hold
-- exactly the raw rows: a materialized view is not atomic with its source
-- insert, so a crash between the two leaves a cell short (each tier's view
-- separately). {table:Identifier} is the tier's table and {grain_s:UInt32}
-- its cell (60, 3600, 10800, 86400: phasemeter.store.rollup.TIERS); seconds
-- intervals are epoch-aligned, so toStartOfInterval(ts, grain) is the tier's
-- toStartOfMinute/Hour/Day in UTC (and the 3-hour blocks). `cells` limits the check to the cells a
-- re-read batch touched (empty: every cell in the window).
SELECT model, input_bucket, minute, sum(raw_n) AS raw_n, sum(rollup_n) AS rollup_n
FROM
(
    SELECT model, input_bucket,
           toStartOfInterval(toDateTime(ts, 'UTC'), toIntervalSecond({grain_s:UInt32}), 'UTC') AS minute,
           count() AS raw_n, toUInt64(0) AS rollup_n
    FROM generations
    WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
      AND (empty({cells:Array(Tuple(String, String, DateTime))})
           OR (model, input_bucket, toStartOfInterval(toDateTime(ts, 'UTC'), toIntervalSecond({grain_s:UInt32}), 'UTC'))
              IN {cells:Array(Tuple(String, String, DateTime))})
    GROUP BY model, input_bucket, minute
    UNION ALL
    SELECT model, input_bucket, minute, toUInt64(0) AS raw_n, sum(n) AS rollup_n
    FROM {table:Identifier}
    WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
      -- A read, so the worker's HTTP API may run it (the query path checks a
      -- tier's first cell with it): it reads rollup tiers and nothing else.
      AND throwIf(NOT has(['generations_minute', 'generations_hour', 'generations_hour3', 'generations_day'], {table:String}),
                  'table: expected generations_minute, generations_hour, generations_hour3 or generations_day') = 0
      AND (empty({cells:Array(Tuple(String, String, DateTime))})
           OR (model, input_bucket, minute) IN {cells:Array(Tuple(String, String, DateTime))})
    GROUP BY model, input_bucket, minute
)
GROUP BY model, input_bucket, minute
HAVING raw_n != rollup_n
ORDER BY model, input_bucket, minute
