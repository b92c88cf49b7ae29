-- The stall alert family's frame (docs/alerts.md): per model × input bucket
-- and window part (current, baseline), over generations WITH chunk data
-- only (a row without it says nothing about stalls): how many have a stall
-- verdict and how many stalled, and the {q} percentile of the largest chunk
-- gap (quantileExactInclusive == numpy linear; a gap's slow end is HIGH).
-- The window parts are assigned exactly as in alert_window_view
-- (schema/0009; tests/unit/test_sql_files.py holds the two to one text).
SELECT
    model,
    input_bucket,
    part,
    count() AS n,
    count(stalled) AS verdict_n,
    countIf(stalled = 1) AS stalled_n,
    if(count(stalled) = 0, NULL, countIf(stalled = 1) / count(stalled)) AS stalled_share,
    count(max_gap_s) AS gap_n,
    quantileExactInclusive({q:Float64})(max_gap_s) AS gap_q,
    toUnixTimestamp64Milli(max(ts)) - toUnixTimestamp64Milli(min(ts)) AS covered_ms
FROM
(
    SELECT
        model, input_bucket, ts, max_gap_s, stalled,
        multiIf(ts >= {cur_start:DateTime64(3)}, 'current',
                arrayExists(s -> toUnixTimestamp64Milli(ts) >= s
                                 AND toUnixTimestamp64Milli(ts) < s + {base_span_ms:Int64},
                            {base_starts_ms:Array(Int64)}), 'baseline',
                '') AS part
    FROM generations
    WHERE ts >= {lo:DateTime64(3)} AND ts < {cur_end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
      AND (max_gap_s IS NOT NULL OR stalled IS NOT NULL)
)
WHERE part != ''
GROUP BY model, input_bucket, part
ORDER BY model, input_bucket, part
