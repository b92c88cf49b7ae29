-- bands_rollup_view (schema/0020_bands_rollup_hour3.sql) answering small cells from their
-- values (schema/0022_rollup_whole_values.sql): the same view, parameters and
-- columns. An answer cell (one step of one model x input bucket) whose
-- prefill and decode values are all held, at most 512 of each, gets its
-- percentiles computed from the values themselves, with the exact path's
-- definition (linear interpolation between order statistics, as
-- phasemeter_rank_pct_v1 computes it over the sorted values): these cells are
-- exact. Every other cell is answered from its sketches as before.
--
-- Why two branches and not one `if` per cell: ClickHouse computes every
-- aggregate of a GROUP BY for every group, so a cell answered from its values
-- would still pay for reading and merging its TDigests, which is the cost
-- this removes. `whole` (keys and counts only: cheap) names the answer cells
-- that are whole; the values branch reads only their rows, the sketch branch
-- only the others' rows.
--
-- A cell is whole when, over all its rows in every tier, the held-values
-- counts equal prefill_n and decode_n and those are at most 512 (each insert
-- block holds least(its count, 512), and a merge keeps the first 512, so only
-- then is every value there). Cells written before schema/0022 hold a count
-- of 0 and go to the sketch branch.
--
-- Replaces the view in place (CREATE OR REPLACE), so the sql/ file and the
-- Grafana panels keep its name and parameters.
CREATE OR REPLACE VIEW bands_rollup_view AS
WITH
    cells AS
    (
        SELECT toStartOfInterval(minute, toIntervalSecond({step_s:UInt32}), 'UTC') AS t, *
        FROM
        (
            -- Each tier answers its own range, so every minute of [start, end)
            -- is counted once (schema/0020): the minute tier outside
            -- [hour_from, hour_to), the hour tier inside it but outside
            -- [hour3_from, hour3_to), the 3-hour tier inside that but outside
            -- [day_from, day_to), the day tier inside that.
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
    ),
    whole AS
    (
        SELECT t, model, input_bucket
        FROM cells
        GROUP BY t, model, input_bucket
        HAVING sum(prefill_values_n) = sum(prefill_n) AND sum(prefill_n) <= 512
           AND sum(decode_values_n) = sum(decode_n) AND sum(decode_n) <= 512
    )
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
    -- The sketch branch: schema/0020's computation over the cells that are not whole.
    SELECT t, model, input_bucket, n, prefill_n, decode_n, abandoned, pq, dq
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
            t, model, input_bucket,
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
        FROM cells
        WHERE (t, model, input_bucket) NOT IN (SELECT t, model, input_bucket FROM whole)
        GROUP BY t, model, input_bucket
    )
    )
    UNION ALL
    -- The values branch: every value of the cell, sorted; rank_pct interpolates
    -- exactly when it holds all prefill_n (decode_n) of them.
    SELECT
        t, model, input_bucket, n, prefill_n, decode_n, abandoned,
        arrayMap(q -> if(prefill_n = 0, nan, phasemeter_rank_pct_v1(pv, prefill_n, q)),
                 [0.01, 0.05, 0.5, 0.95, 0.99]) AS pq,
        arrayMap(q -> if(decode_n = 0, nan, phasemeter_rank_pct_v1(dv, decode_n, q)),
                 [0.01, 0.05, 0.5, 0.95, 0.99]) AS dq
    FROM
    (
        SELECT
            t, model, input_bucket,
            sum(n) AS n,
            sum(prefill_n) AS prefill_n,
            sum(decode_n) AS decode_n,
            sum(abandoned_n) AS abandoned,
            arraySort(groupArrayMerge(512)(prefill_values)) AS pv,
            arraySort(groupArrayMerge(512)(decode_values)) AS dv
        FROM cells
        WHERE (t, model, input_bucket) IN (SELECT t, model, input_bucket FROM whole)
        GROUP BY t, model, input_bucket
    )
)
ORDER BY model, input_bucket, t;
