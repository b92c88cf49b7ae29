-- Cells where any rollup tier does not hold exactly the raw rows, every tier
-- in one statement: the cells of each tier that the minute cells {cells} (a
-- re-read batch's) fall in. After a resume the worker checks each batch of
-- its re-read window and almost always finds nothing; rollup_mismatches.sql,
-- a tier at a time, read raw once per tier for that, this reads it once
-- (phasemeter.store.rollup.tier_mismatches). Per tier, the answer is
-- rollup_mismatches.sql's on those cells (tests/integration/test_ledger.py).
--
-- Raw is counted per minute over the whole days [start, end) that hold the
-- cells (the coarsest tier's cells), for the cells' model x bucket {pairs}
-- only; each minute's count then goes to its cell at every grain. A cell
-- starts at intDiv(t, grain) * grain: seconds intervals are epoch-aligned,
-- so this is rollup_mismatches.sql's toStartOfInterval, which takes no
-- per-row grain. The grains and the tables are the tiers'
-- (phasemeter.store.rollup.TIERS), written out as the schema fixes them
-- (tests/unit/test_sql_files.py); the time and pair filters reach each
-- table's primary key through the UNION. Only the cells holding a listed
-- minute are compared. {cells} is used once: each use of a bound list is
-- parsed again.
WITH [60, 3600, 10800, 86400] AS grains
SELECT grain_s, model, input_bucket, cell, sum(raw_n) AS raw_n, sum(rollup_n) AS rollup_n
FROM
(
    SELECT grain_s, model, input_bucket, toDateTime(intDiv(toUInt32(minute), grain_s) * grain_s, 'UTC') AS cell,
           raw_n, toUInt64(0) AS rollup_n
    FROM
    (
        SELECT model, input_bucket, toStartOfMinute(toDateTime(ts, 'UTC')) AS minute, count() AS raw_n
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (model, input_bucket) IN {pairs:Array(Tuple(String, String))}
        GROUP BY model, input_bucket, minute
    )
    ARRAY JOIN grains AS grain_s
    UNION ALL
    SELECT grain_s, model, input_bucket, minute, toUInt64(0), sum(n)
    FROM
    (
        SELECT 60 AS grain_s, model, input_bucket, minute, n FROM generations_minute
        UNION ALL SELECT 3600, model, input_bucket, minute, n FROM generations_hour
        UNION ALL SELECT 10800, model, input_bucket, minute, n FROM generations_hour3
        UNION ALL SELECT 86400, model, input_bucket, minute, n FROM generations_day
    )
    WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
      AND (model, input_bucket) IN {pairs:Array(Tuple(String, String))}
    GROUP BY grain_s, model, input_bucket, minute
)
WHERE (grain_s, model, input_bucket, cell) IN
      (SELECT grain_s, c.1, c.2, toDateTime(intDiv(toUInt32(c.3), grain_s) * grain_s, 'UTC')
       FROM (SELECT arrayJoin({cells:Array(Tuple(String, String, DateTime))}) AS c)
       ARRAY JOIN grains AS grain_s)
GROUP BY grain_s, model, input_bucket, cell
HAVING raw_n != rollup_n
ORDER BY grain_s, model, input_bucket, cell
