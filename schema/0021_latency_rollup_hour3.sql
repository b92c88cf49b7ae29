-- latency_rollup_view (schema/0017_latency_rollup_tiers.sql) with the 3-hour tier (schema/0019): the
-- same view, computation and columns, with two more parameters for the part
-- of [start, end) the 3-hour tier answers:
--   latency_rollup_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       hour_from = ..., hour_to = ..., hour3_from = ..., hour3_to = ...,
--       day_from = ..., day_to = ...)
-- with start <= hour_from <= hour3_from <= day_from <= day_to <= hour3_to
-- <= hour_to <= end (else it fails), each tier's range on whole cells of its
-- grain, and a tier used only when its grain divides step_s.
-- phasemeter.analytics.paths.tier_plan computes them (pure, unit-tested).
-- A tier that answers nothing gets the range of the tier inside it (or an
-- empty one at the end of the tier outside it), so the ranges always nest.
--
-- One view for every tier, for the reason in schema/0017_latency_rollup_tiers.sql. Replaces
-- the view in place (CREATE OR REPLACE), so the sql/ file and the Grafana
-- panels keep its name; both now pass the two new parameters.
CREATE OR REPLACE VIEW latency_rollup_view AS
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
        FROM
        (
            -- Each tier answers its own range, so every minute of [start, end)
            -- is counted once: the minute tier outside [hour_from, hour_to),
            -- the hour tier inside it but outside [hour3_from, hour3_to), the
            -- 3-hour tier inside that but outside [day_from, day_to), the day
            -- tier inside that. An unused tier gets an empty range.
            SELECT * FROM generations_minute
            WHERE (minute >= {start:DateTime64(3)} AND minute < {hour_from:DateTime64(3)})
               OR (minute >= {hour_to:DateTime64(3)} AND minute < {end:DateTime64(3)})
            UNION ALL
            SELECT * FROM generations_hour
            WHERE (minute >= {hour_from:DateTime64(3)} AND minute < {hour3_from:DateTime64(3)})
               OR (minute >= {hour3_to:DateTime64(3)} AND minute < {hour_to:DateTime64(3)})
            UNION ALL
            SELECT * FROM generations_hour3
            WHERE (minute >= {hour3_from:DateTime64(3)} AND minute < {day_from:DateTime64(3)})
               OR (minute >= {day_to:DateTime64(3)} AND minute < {hour3_to:DateTime64(3)})
            UNION ALL
            SELECT * FROM generations_day
            WHERE minute >= {day_from:DateTime64(3)} AND minute < {day_to:DateTime64(3)}
        )
        WHERE (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          -- The ranges must nest, or a minute would be counted twice or not at all.
          AND throwIf(NOT ({start:DateTime64(3)} <= {hour_from:DateTime64(3)}
                           AND {hour_from:DateTime64(3)} <= {hour3_from:DateTime64(3)}
                           AND {hour3_from:DateTime64(3)} <= {day_from:DateTime64(3)}
                           AND {day_from:DateTime64(3)} <= {day_to:DateTime64(3)}
                           AND {day_to:DateTime64(3)} <= {hour3_to:DateTime64(3)}
                           AND {hour3_to:DateTime64(3)} <= {hour_to:DateTime64(3)}
                           AND {hour_to:DateTime64(3)} <= {end:DateTime64(3)}),
                      'tier ranges must nest: start <= hour_from <= hour3_from <= day_from <= day_to <= hour3_to <= hour_to <= end') = 0
        GROUP BY t, model, input_bucket
    )
)
ORDER BY model, input_bucket, t;
