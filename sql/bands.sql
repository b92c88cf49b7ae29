-- Percentile bands per model × input bucket × time step, both phases.
-- Exact percentiles: quantilesExactInclusive equals
-- numpy.percentile(values, q, method="linear") (numpy's default).
-- For a throughput the slow tail is the LOW end: p1/p5.
-- Nulls (no first token, output_tokens <= 1) are skipped, never counted as 0.
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
        input_bucket,
        count() AS n,
        count(prefill_tps) AS prefill_n,
        quantilesExactInclusive(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_tps) AS pq,
        count(decode_tps) AS decode_n,
        quantilesExactInclusive(0.01, 0.05, 0.5, 0.95, 0.99)(decode_tps) AS dq
    FROM generations
    WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
      AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
    GROUP BY t, model, input_bucket
)
ORDER BY model, input_bucket, t
