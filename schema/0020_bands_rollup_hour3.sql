-- bands_rollup_view (schema/0016_bands_rollup_tiers.sql) with the 3-hour tier (schema/0019): the
-- same view, computation and columns, with two more parameters for the part
-- of [start, end) the 3-hour tier answers:
--   bands_rollup_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       hour_from = ..., hour_to = ..., hour3_from = ..., hour3_to = ...,
--       day_from = ..., day_to = ...)
-- with start <= hour_from <= hour3_from <= day_from <= day_to <= hour3_to
-- <= hour_to <= end (else it fails), each tier's range on whole cells of its
-- grain, and a tier used only when its grain divides step_s.
-- phasemeter.analytics.paths.tier_plan computes them (pure, unit-tested).
-- A tier that answers nothing gets the range of the tier inside it (or an
-- empty one at the end of the tier outside it), so the ranges always nest.
--
-- One view for every tier, for the reason in schema/0016_bands_rollup_tiers.sql. Replaces
-- the view in place (CREATE OR REPLACE), so the sql/ file and the Grafana
-- panels keep its name; both now pass the two new parameters.
CREATE OR REPLACE VIEW bands_rollup_view AS
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
