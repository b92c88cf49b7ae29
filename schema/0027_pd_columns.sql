-- Prefill/decode disaggregated serving (docs/phases.md): the instance that ran
-- the prefill, the one that streamed the answer, and the seconds the KV cache
-- took to move between them. The replicas are labels like `replica`
-- (LowCardinality, '' when the event did not say: a unified server); the
-- transfer is Nullable: a row without it says nothing about a transfer.
-- AFTER output_tokens_estimated keeps the table's column order equal to the
-- worker's ROW_COLUMNS (stream_jobs/derive.py). The rollups do not carry
-- them: per-pool bands and the transfer's percentiles read raw rows.
ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS prefill_replica LowCardinality(String) DEFAULT '' CODEC(ZSTD(1)) AFTER output_tokens_estimated,
    ADD COLUMN IF NOT EXISTS decode_replica  LowCardinality(String) DEFAULT '' CODEC(ZSTD(1)) AFTER prefill_replica,
    ADD COLUMN IF NOT EXISTS kv_transfer_s   Nullable(Float64) CODEC(ZSTD(1)) AFTER decode_replica;

-- Per-pool bands and latency (`--by prefill_replica` / `--by decode_replica`,
-- docs/analytics.md): the exact views of 0024 and 0025 with one more key,
-- `pool`, the value of the column named by {by:String}:
--   bands_pool_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = ..., prefill = ..., by = '' | 'prefill_replica' | 'decode_replica')
--   latency_pool_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = ..., by = ...)
-- Each is its exact view (0024, 0025) with the pool added (and, for latency,
-- the transfer's percentiles) and nothing else changed, held so by
-- tests/unit/test_sql_files.py: a view of their own, not
-- the exact views redefined with by = '', because the hot query must not pay
-- for a key it does not use (as re-bucketing, docs/analytics.md). by = ''
-- groups by nothing more (pool is ''); anything else fails (throwIf). A row
-- whose event named no pool (a unified server) has pool ''. The latency view adds
-- the KV transfer's percentiles (kv_transfer_s; HIGH = slow tail), counted
-- over the rows that carry one: kv_transfer_n = 0 where none does. Raw rows
-- only: the rollups keep no pools and no transfer.
CREATE VIEW IF NOT EXISTS bands_pool_view AS
SELECT
    t, model, pool, input_bucket, n,
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
        pool,
        input_bucket,
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
            ts, model, input_bucket, status, ttft_s, decode_tps,
            if({by:String} = 'prefill_replica', prefill_replica,
               if({by:String} = 'decode_replica', decode_replica, '')) AS pool,
            -- nested if, 'total' first: measured ~10 % faster than multiIf (4M rows)
            if({prefill:String} = 'total', prefill_tps,
               if({prefill:String} = 'uncached', prefill_tps_uncached,
                  if(queue_s IS NULL OR ttft_s IS NULL OR ttft_s <= queue_s, NULL,
                     input_tokens / (ttft_s - queue_s)))) AS prefill_value,
            ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['total', 'engine', 'uncached'], {prefill:String}),
                      'prefill: expected total, engine or uncached') = 0
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
          AND throwIf(NOT has(['', 'prefill_replica', 'decode_replica'], {by:String}),
                      'by: expected prefill_replica or decode_replica') = 0
    )
    GROUP BY t, model, pool, input_bucket
)
ORDER BY model, pool, input_bucket, t;

CREATE VIEW IF NOT EXISTS latency_pool_view AS
SELECT
    t, model, pool, input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99,
    kv_transfer_n, kq[1] AS kv_transfer_p50, kq[2] AS kv_transfer_p90, kq[3] AS kv_transfer_p99,
    abandoned, abandoned_prefill, abandoned_decode
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        pool,
        input_bucket,
        countIf(keep) AS n,
        countIf(keep AND ttft_s IS NOT NULL) AS ttft_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(ttft_s, keep) AS tq,
        countIf(keep AND tpot_s IS NOT NULL) AS tpot_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(tpot_s, keep) AS oq,
        countIf(keep AND queue_s IS NOT NULL) AS queue_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(queue_s, keep) AS qq,
        countIf(keep AND kv_transfer_s IS NOT NULL) AS kv_transfer_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(kv_transfer_s, keep) AS kq,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT ts, model, input_bucket, status, ttft_s, tpot_s, queue_s, kv_transfer_s,
               if({by:String} = 'prefill_replica', prefill_replica,
                  if({by:String} = 'decode_replica', decode_replica, '')) AS pool,
               ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
          AND throwIf(NOT has(['', 'prefill_replica', 'decode_replica'], {by:String}),
                      'by: expected prefill_replica or decode_replica') = 0
    )
    GROUP BY t, model, pool, input_bucket
)
ORDER BY model, pool, input_bucket, t;
