-- Cells (model x bucket x minute) where the per-minute rollup does not hold
-- exactly the raw rows: a materialized view is not atomic with its source
-- insert, so a crash between the two leaves a cell short. `cells` limits the
-- check to the cells a re-read batch touched (empty: every cell in the window).
SELECT model, input_bucket, minute, sum(raw_n) AS raw_n, sum(rollup_n) AS rollup_n
FROM
(
    SELECT model, input_bucket, toStartOfMinute(toDateTime(ts, 'UTC')) AS minute,
           count() AS raw_n, toUInt64(0) AS rollup_n
    FROM generations
    WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
      AND (empty({cells:Array(Tuple(String, String, DateTime))})
           OR (model, input_bucket, toStartOfMinute(toDateTime(ts, 'UTC'))) IN {cells:Array(Tuple(String, String, DateTime))})
    GROUP BY model, input_bucket, minute
    UNION ALL
    SELECT model, input_bucket, minute, toUInt64(0) AS raw_n, sum(n) AS rollup_n
    FROM generations_minute
    WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
      AND (empty({cells:Array(Tuple(String, String, DateTime))})
           OR (model, input_bucket, minute) IN {cells:Array(Tuple(String, String, DateTime))})
    GROUP BY model, input_bucket, minute
)
GROUP BY model, input_bucket, minute
HAVING raw_n != rollup_n
ORDER BY model, input_bucket, minute
