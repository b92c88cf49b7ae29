-- Decode stalls per model × input bucket × time step, exact (raw rows only:
-- the rollup has no gap data). `phasemeter query bands --stalls`.
-- max_gap_s: the largest gap between consecutive streamed chunks of one
-- generation; stalled: it had a gap over its gap_threshold_s (docs/metrics.md).
-- Rows without chunk data (NULL) are skipped, never counted as "no stall":
-- chunk_n says how many rows the gap columns stand on.
-- quantilesExactInclusive equals numpy.percentile(values, q, method="linear").
-- For a gap the slow tail is the HIGH end: p99, max.
--
-- {abandoned:String}: 'include' (default) or 'exclude', as in bands_exact.sql;
--   the abandoned* columns count them either way.
SELECT
    t, model, input_bucket, n,
    chunk_n,
    gap_n, gq[1] AS gap_p50, gq[2] AS gap_p99, gap_max,
    stalled_n,
    if(verdict_n = 0, NULL, stalled_n / verdict_n) AS stalled_share,
    estimated_n,
    abandoned, abandoned_prefill, abandoned_decode
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        input_bucket,
        countIf(keep) AS n,
        countIf(keep AND chunks IS NOT NULL) AS chunk_n,
        countIf(keep AND max_gap_s IS NOT NULL) AS gap_n,
        quantilesExactInclusiveIf(0.5, 0.99)(max_gap_s, keep) AS gq,
        maxIf(max_gap_s, keep) AS gap_max,
        countIf(keep AND stalled IS NOT NULL) AS verdict_n,
        countIf(keep AND stalled = 1) AS stalled_n,
        countIf(keep AND output_tokens_estimated = 1) AS estimated_n,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT
            ts, model, input_bucket, status, ttft_s, chunks, max_gap_s, stalled, output_tokens_estimated,
            ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, input_bucket
)
ORDER BY model, input_bucket, t
