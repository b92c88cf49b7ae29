-- The rollup path of the latency percentiles as a parameterized view, so that the CLI,
-- the worker's HTTP API, the charts and the Grafana panels read one
-- definition (sql/latency_rollup.sql selects from it; so do the dashboard's
-- panels). Called as
--   latency_rollup_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...])
-- with [start, end) on whole minutes and step_s a multiple of 60.
--
-- Latency percentiles from the per-minute rollup (same columns as
-- sql/latency.sql). ttft/tpot: exact numpy-linear when the needed ranks are
-- among the 16 highest values kept per minute (always when n <= 16), else the
-- merged quantilesTDigest sketch; queue_s: sketch (exact when n <= 1 trivially).
-- Abandoned generations are always included (see sql/bands_rollup.sql);
-- abandoned_prefill / abandoned_decode are NULL: the rollup has no phase split.
CREATE VIEW IF NOT EXISTS latency_rollup_view AS
SELECT
    t, model, input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99,
    abandoned,
    CAST(NULL, 'Nullable(UInt64)') AS abandoned_prefill,
    CAST(NULL, 'Nullable(UInt64)') AS abandoned_decode
FROM
(
    SELECT
        t, model, input_bucket, n, ttft_n, tpot_n, queue_n, abandoned,
        arrayMap(i -> if(ttft_n = 0, nan, if(NOT isNaN(t_high[i]), t_high[i], t_td[i])), range(1, 4)) AS tq,
        arrayMap(i -> if(tpot_n = 0, nan, if(NOT isNaN(o_high[i]), o_high[i], o_td[i])), range(1, 4)) AS oq,
        arrayMap(i -> if(queue_n = 0, nan, q_td[i]), range(1, 4)) AS qq,
        arrayMap(q -> -phasemeter_rank_pct_v1(t_hi, ttft_n, q), [0.5, 0.1, 0.01]) AS t_high,
        arrayMap(q -> -phasemeter_rank_pct_v1(o_hi, tpot_n, q), [0.5, 0.1, 0.01]) AS o_high
    FROM
    (
        SELECT
            toStartOfInterval(minute, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
            model,
            input_bucket,
            sum(n) AS n,
            sum(ttft_n) AS ttft_n,
            sum(tpot_n) AS tpot_n,
            sum(queue_n) AS queue_n,
            sum(abandoned_n) AS abandoned,
            quantilesTDigestMerge(0.5, 0.9, 0.99)(ttft_td) AS t_td,
            quantilesTDigestMerge(0.5, 0.9, 0.99)(tpot_td) AS o_td,
            quantilesTDigestMerge(0.5, 0.9, 0.99)(queue_td) AS q_td,
            groupArraySortedMerge(16)(ttft_hi) AS t_hi,
            groupArraySortedMerge(16)(tpot_hi) AS o_hi
        FROM generations_minute
        WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
        GROUP BY t, model, input_bucket
    )
)
ORDER BY model, input_bucket, t;
