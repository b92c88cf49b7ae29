-- The exact bands and latencies over the stored input bucket and over buckets
-- recomputed at query time from raw input_tokens (`--buckets`): one definition
-- each, so a change to what a band or a latency is reaches both.
--   bands_exact_buckets_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = ..., prefill = ..., edges = [...], labels = [...])
--   latency_exact_buckets_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = ..., edges = [...], labels = [...])
-- edges = []: the stored input_bucket (bands_exact_view and latency_exact_view,
-- schema/0024 and 0025, now select from these so); else bucket =
-- labels[number of edges <= input_tokens] (edges start at 0 and ascend, so the
-- index is 1..length(labels); intervals are [lo, hi), the last one open), and
-- `buckets` names new labels (a HAVING: the bucket exists after the GROUP BY).
-- The stored bucket's filter stays in WHERE, on the column, where the primary
-- key (model, input_bucket, ts) skips the granules of other buckets. `if`
-- returns a plain String (even of two LowCardinality ones): the cells are
-- grouped by it, and only the answer's input_bucket is made
-- LowCardinality(String) again, the stored column's type, so the views'
-- columns keep their documented types (docs/sql.md). Casting every row back
-- instead took 1.11x the CPU of the stored-bucket query; this, 1.00x.
-- {abandoned}, {prefill} and the columns: as schema/0024 and 0025 describe them.
CREATE VIEW IF NOT EXISTS bands_exact_buckets_view AS
SELECT
    t, model, toLowCardinality(bucket) AS input_bucket, n,
    prefill_n,
    pq[1] AS prefill_p1, pq[2] AS prefill_p5, pq[3] AS prefill_p50, pq[4] AS prefill_p95, pq[5] AS prefill_p99,
    decode_n,
    dq[1] AS decode_p1, dq[2] AS decode_p5, dq[3] AS decode_p50, dq[4] AS decode_p95, dq[5] AS decode_p99,
    abandoned, abandoned_prefill, abandoned_decode,
    {prefill:String} AS prefill_variant
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        bucket,
        countIf(keep) AS n,
        countIf(keep AND prefill_value IS NOT NULL) AS prefill_n,
        quantilesExactInclusiveIf(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_value, keep) AS pq,
        countIf(keep AND decode_tps IS NOT NULL) AS decode_n,
        quantilesExactInclusiveIf(0.01, 0.05, 0.5, 0.95, 0.99)(decode_tps, keep) AS dq,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT
            ts, model, status, ttft_s, decode_tps,
            if(empty({edges:Array(UInt32)}), input_bucket,
               arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})))
                AS bucket,
            -- nested if, 'total' first: measured ~10 % faster than multiIf (4M rows)
            if({prefill:String} = 'total', prefill_tps,
               if({prefill:String} = 'uncached', prefill_tps_uncached,
                  if(queue_s IS NULL OR ttft_s IS NULL OR ttft_s <= queue_s, NULL,
                     input_tokens / (ttft_s - queue_s)))) AS prefill_value,
            ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (NOT empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)})
               OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['total', 'engine', 'uncached'], {prefill:String}),
                      'prefill: expected total, engine or uncached') = 0
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, bucket
    HAVING empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)}) OR has({buckets:Array(String)}, bucket)
)
ORDER BY model, input_bucket, t;

CREATE OR REPLACE VIEW bands_exact_view AS
SELECT *
FROM bands_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)}, abandoned = {abandoned:String},
     prefill = {prefill:String}, edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'));

CREATE VIEW IF NOT EXISTS latency_exact_buckets_view AS
SELECT
    t, model, toLowCardinality(bucket) AS input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99,
    abandoned, abandoned_prefill, abandoned_decode
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        bucket,
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
        SELECT ts, model, status, ttft_s, tpot_s, queue_s,
               if(empty({edges:Array(UInt32)}), input_bucket,
                  arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})))
                   AS bucket,
               ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (NOT empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)})
               OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, bucket
    HAVING empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)}) OR has({buckets:Array(String)}, bucket)
)
ORDER BY model, input_bucket, t;

CREATE OR REPLACE VIEW latency_exact_view AS
SELECT *
FROM latency_exact_buckets_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)}, abandoned = {abandoned:String},
     edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'));

-- slo_view (schema/0026) for an SLO no worker declared: the definition's
-- scalar subquery finds no row, and its NULLs went on as the exact view's
-- parameters (count_failed: "Value \N cannot be parsed as UInt8"): a Grafana
-- panel showed that error where no SLO is declared, the default. Now such an
-- SLO reads an empty window on both paths and answers no rows; the panel says
-- "no SLO declared" (its noValue, dashboards/grafana/phasemeter.json).
-- Otherwise the view is 0026's, its rollup half's window bounded as
-- bands_view's below ([end, end) when the raw rows answer).
CREATE OR REPLACE VIEW slo_view AS
WITH (SELECT tuple(slo_id, ttft_max, prefill_min, tpot_max, decode_min, e2e_max, count_failed, models, buckets)
      FROM slo_definitions WHERE name = {slo:String} ORDER BY registered_at DESC LIMIT 1) AS d,
     d IS NOT NULL AS declared,
     (SELECT phasemeter_slo_covered_from_v1(min(registered_at)) FROM slo_definitions WHERE slo_id = d.1) AS covered,
     toStartOfMinute({start:DateTime64(3)}) AS minute_from,
     declared AND (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)},
                                                     step_s = {step_s:UInt32}, models = {models:Array(String)},
                                                     buckets = {buckets:Array(String)}))
         AND covered <= minute_from AS rollup,
     toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)})
         AS minute_end
SELECT *, 'exact' AS path
FROM slo_exact_view(start = {start:DateTime64(3)}, end = if(rollup OR NOT declared, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     ttft_max = d.2, prefill_min = d.3, tpot_max = d.4, decode_min = d.5, e2e_max = d.6,
     count_failed = ifNull(d.7, 0), slo_models = ifNull(d.8, []), slo_buckets = ifNull(d.9, []))
UNION ALL
SELECT *, 'rollup' AS path
FROM slo_rollup_view(start = if(rollup, minute_from, minute_end), end = minute_end, step_s = {step_s:UInt32},
     slo_id = ifNull(d.1, 0),
     models = {models:Array(String)}, buckets = {buckets:Array(String)});

-- bands_view and latency_view (schema/0024, 0025) planned in about two thirds
-- of the time: ClickHouse expands a view's parameters where they are used, so
-- the rule's scalar subquery (read_path_view), carried by the rollup half's
-- end and its six tier bounds, was analysed some twenty times per query
-- (0.25-0.7 s on an empty chDB store; EXPLAIN alone took as long). Now the
-- rollup half's window and tier bounds are the constant whole-minute end, and
-- only its start says which path answers ([end, end): empty, no granule read);
-- the exact half reads the one exact definition (bands_exact_buckets_view)
-- with no view between. Same rows as before (tests/integration/test_grafana_queries.py
-- holds the panels to the CLI on both paths).
CREATE OR REPLACE VIEW bands_view AS
WITH (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
                                        models = {models:Array(String)}, buckets = {buckets:Array(String)})) AS rollup,
     toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)})
         AS minute_end
SELECT *, 'exact' AS path
FROM bands_exact_buckets_view(start = {start:DateTime64(3)}, end = if(rollup, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = 'include', prefill = 'total', edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'))
UNION ALL
SELECT *, 'rollup' AS path
FROM bands_rollup_view(start = if(rollup, toStartOfMinute({start:DateTime64(3)}), minute_end), end = minute_end,
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = minute_end, hour_to = minute_end, hour3_from = minute_end, hour3_to = minute_end,
     day_from = minute_end, day_to = minute_end);

CREATE OR REPLACE VIEW latency_view AS
WITH (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
                                        models = {models:Array(String)}, buckets = {buckets:Array(String)})) AS rollup,
     toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)})
         AS minute_end
SELECT *, 'exact' AS path
FROM latency_exact_buckets_view(start = {start:DateTime64(3)}, end = if(rollup, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = 'include', edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)'))
UNION ALL
SELECT *, 'rollup' AS path
FROM latency_rollup_view(start = if(rollup, toStartOfMinute({start:DateTime64(3)}), minute_end), end = minute_end,
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = minute_end, hour_to = minute_end, hour3_from = minute_end, hour3_to = minute_end,
     day_from = minute_end, day_to = minute_end);
