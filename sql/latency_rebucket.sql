-- Latency percentiles (exact, as sql/latency.sql: same {abandoned} parameter
-- and columns) with input buckets recomputed at query time from raw
-- input_tokens (see sql/bands_rebucket.sql). For people who think in latency:
-- for ttft_s / tpot_s / queue_s the slow tail is the HIGH end (p90/p99).
-- quantilesExactInclusive == numpy.percentile(method="linear").
SELECT
    t, model, input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99,
    abandoned, abandoned_prefill, abandoned_decode
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})) AS input_bucket,
        countIf(keep) AS n,
        countIf(keep AND ttft_s IS NOT NULL) AS ttft_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(ttft_s, keep) AS tq,
        countIf(keep AND tpot_s IS NOT NULL) AS tpot_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(tpot_s, keep) AS oq,
        countIf(keep AND queue_s IS NOT NULL) AS queue_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(queue_s, keep) AS qq,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT ts, model, input_tokens, status, ttft_s, tpot_s, queue_s,
               ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, input_bucket
    HAVING empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket)
)
ORDER BY model, input_bucket, t
