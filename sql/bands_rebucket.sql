-- Percentile bands (exact, as sql/bands.sql) with input buckets recomputed at
-- query time from the raw input_tokens: bucket = labels[number of edges <=
-- input_tokens]. edges start at 0 and ascend, so the index is 1..length(labels);
-- intervals are [lo, hi), the last one open. `buckets` filters on NEW labels.
SELECT
    t, model, input_bucket, n,
    prefill_n,
    pq[1] AS prefill_p1, pq[2] AS prefill_p5, pq[3] AS prefill_p50, pq[4] AS prefill_p95, pq[5] AS prefill_p99,
    decode_n,
    dq[1] AS decode_p1, dq[2] AS decode_p5, dq[3] AS decode_p50, dq[4] AS decode_p95, dq[5] AS decode_p99
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})) AS input_bucket,
        count() AS n,
        count(prefill_tps) AS prefill_n,
        quantilesExactInclusive(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_tps) AS pq,
        count(decode_tps) AS decode_n,
        quantilesExactInclusive(0.01, 0.05, 0.5, 0.95, 0.99)(decode_tps) AS dq
    FROM generations
    WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
    GROUP BY t, model, input_bucket
    HAVING empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket)
)
ORDER BY model, input_bucket, t
