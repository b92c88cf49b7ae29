-- Generations covered by the per-minute rollup in a window of whole minutes
-- (backfill reports what it added; tests compare it with the raw count).
SELECT sum(n) AS n
FROM generations_minute
WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
