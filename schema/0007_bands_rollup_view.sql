-- The rollup path of the throughput bands as a parameterized view, so that the CLI,
-- the worker's HTTP API, the charts and the Grafana panels read one
-- definition (sql/bands_rollup.sql selects from it; so do the dashboard's
-- panels). Called as
--   bands_rollup_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...])
-- with [start, end) on whole minutes and step_s a multiple of 60.
--
-- Percentile bands from the per-minute rollup (schema/0003): same columns as
-- sql/bands_exact.sql. Window covers whole minutes: minute >= start AND minute < end
-- (the caller aligns start/end to minutes). step_s must be a multiple of 60.
--
-- Per merged cell and percentile q (n = non-null samples, pos = q * (n - 1);
-- phasemeter_rank_pct_v1, schema/0006, does the interpolation):
-- * if the ranks floor(pos) and floor(pos)+1 are among the 16 lowest (or, for
--   the fast side, the 16 highest) values kept per minute, the result is the
--   EXACT numpy method="linear" percentile, computed from those values;
-- * otherwise the merged quantilesTDigest sketch answers (dense cells, where
--   its error is small: docs/analytics.md has the measured numbers).
-- For a throughput the slow tail is the LOW end (p1/p5).
-- Abandoned generations are always inside the states (they cannot be taken
-- out again: the caller routes --abandoned exclude to the exact path); the
-- rollup counts them (abandoned_n) but not by phase, so abandoned_prefill /
-- abandoned_decode are NULL (unknown) here. Only prefill 'total' is kept.
CREATE VIEW IF NOT EXISTS bands_rollup_view AS
SELECT
    t, model, input_bucket, n,
    prefill_n,
    pq[1] AS prefill_p1, pq[2] AS prefill_p5, pq[3] AS prefill_p50, pq[4] AS prefill_p95, pq[5] AS prefill_p99,
    decode_n,
    dq[1] AS decode_p1, dq[2] AS decode_p5, dq[3] AS decode_p50, dq[4] AS decode_p95, dq[5] AS decode_p99,
    abandoned,
    CAST(NULL, 'Nullable(UInt64)') AS abandoned_prefill,
    CAST(NULL, 'Nullable(UInt64)') AS abandoned_decode,
    'total' AS prefill_variant
FROM
(
    SELECT
        t, model, input_bucket, n, prefill_n, decode_n, abandoned,
        arrayMap(i -> if(prefill_n = 0, nan,
                 if(NOT isNaN(p_low[i]), p_low[i], if(NOT isNaN(p_high[i]), p_high[i], p_td[i]))),
                 range(1, 6)) AS pq,
        arrayMap(i -> if(decode_n = 0, nan,
                 if(NOT isNaN(d_low[i]), d_low[i], if(NOT isNaN(d_high[i]), d_high[i], d_td[i]))),
                 range(1, 6)) AS dq,
        arrayMap(q -> phasemeter_rank_pct_v1(p_lo, prefill_n, q), [0.01, 0.05, 0.5, 0.95, 0.99]) AS p_low,
        arrayMap(q -> -phasemeter_rank_pct_v1(p_hi, prefill_n, q), [0.99, 0.95, 0.5, 0.05, 0.01]) AS p_high,
        arrayMap(q -> phasemeter_rank_pct_v1(d_lo, decode_n, q), [0.01, 0.05, 0.5, 0.95, 0.99]) AS d_low,
        arrayMap(q -> -phasemeter_rank_pct_v1(d_hi, decode_n, q), [0.99, 0.95, 0.5, 0.05, 0.01]) AS d_high
    FROM
    (
        SELECT
            toStartOfInterval(minute, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
            model,
            input_bucket,
            sum(n) AS n,
            sum(prefill_n) AS prefill_n,
            sum(decode_n) AS decode_n,
            sum(abandoned_n) AS abandoned,
            quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_td) AS p_td,
            quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(decode_td) AS d_td,
            groupArraySortedMerge(16)(prefill_lo) AS p_lo,
            groupArraySortedMerge(16)(prefill_hi) AS p_hi,
            groupArraySortedMerge(16)(decode_lo) AS d_lo,
            groupArraySortedMerge(16)(decode_hi) AS d_hi
        FROM generations_minute
        WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
        GROUP BY t, model, input_bucket
    )
)
ORDER BY model, input_bucket, t;
