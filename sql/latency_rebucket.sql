-- Latency percentiles (exact, as sql/latency.sql) with input buckets recomputed
-- at query time from raw input_tokens (see sql/bands_rebucket.sql). For people who
-- think in latency: for ttft_s / tpot_s / queue_s the slow tail is the HIGH end
-- (p90/p99). quantilesExactInclusive == numpy.percentile(method="linear").
SELECT
    t, model, input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})) AS input_bucket,
        count() AS n,
        count(ttft_s) AS ttft_n,
        quantilesExactInclusive(0.5, 0.9, 0.99)(ttft_s) AS tq,
        count(tpot_s) AS tpot_n,
        quantilesExactInclusive(0.5, 0.9, 0.99)(tpot_s) AS oq,
        count(queue_s) AS queue_n,
        quantilesExactInclusive(0.5, 0.9, 0.99)(queue_s) AS qq
    FROM generations
    WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
    GROUP BY t, model, input_bucket
    HAVING empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket)
)
ORDER BY model, input_bucket, t
