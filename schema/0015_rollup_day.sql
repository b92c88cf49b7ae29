-- The day tier of the rollup: the same cell states as generations_minute
-- (schema/0003), one cell per model x input bucket x day, so a long window
-- merges 1440x fewer states than the minute tier (phasemeter.analytics.paths.tier_plan picks
-- the tiers by window and step).
--
-- Fed from `generations` directly, NOT chained off generations_minute: the
-- worker's crash repair deletes a short minute cell and rebuilds it from raw
-- (stream_jobs/ledger.py); a view chained off the minute table would count
-- that rebuild a second time here. Each tier is instead checked against raw
-- at its own grain and repaired the same way (phasemeter/store/rollup.py).
--
-- The time column is called `minute` in every tier: it is the cell's first
-- minute, and one name lets one query read any tier (schema/0016, 0017) and
-- one repair query check any tier (sql/rollup_mismatches.sql).
--
-- Columns, states, codecs, TTL and deduplication window as in schema/0003 (read
-- the comments there); the columns and the view's SELECT must stay those of
-- the minute tier but for the time function: tests/integration/test_tiers.py
-- compares the views' SELECTs as the store holds them.
--
-- index_granularity 32 (a month of one series per granule): a day cell's
-- states are large, and a query reads whole granules and merges states it
-- then filters out, so big granules would cost a 30-day query (30 cells per
-- series) far more than the cells it needs.
--
-- Yearly partitions: a day tier holds one row a day per model x bucket, so
-- monthly parts would be tiny; the TTL deletes rows by merge either way.
CREATE TABLE IF NOT EXISTS generations_day
(
    minute       DateTime('UTC') CODEC(Delta, ZSTD(1)),
    model        LowCardinality(String),
    input_bucket LowCardinality(String),
    n            SimpleAggregateFunction(sum, UInt64),
    ok_n         SimpleAggregateFunction(sum, UInt64),
    error_n      SimpleAggregateFunction(sum, UInt64),
    cancelled_n  SimpleAggregateFunction(sum, UInt64),
    abandoned_n  SimpleAggregateFunction(sum, UInt64),
    not_ok_n     SimpleAggregateFunction(sum, UInt64),
    prefill_n    SimpleAggregateFunction(sum, UInt64),
    decode_n     SimpleAggregateFunction(sum, UInt64),
    ttft_n       SimpleAggregateFunction(sum, UInt64),
    tpot_n       SimpleAggregateFunction(sum, UInt64),
    queue_n      SimpleAggregateFunction(sum, UInt64),
    prefill_td   AggregateFunction(quantilesTDigest(0.01, 0.05, 0.5, 0.95, 0.99), Float64),
    decode_td    AggregateFunction(quantilesTDigest(0.01, 0.05, 0.5, 0.95, 0.99), Float64),
    ttft_td      AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64),
    tpot_td      AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64),
    queue_td     AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64),
    prefill_lo   AggregateFunction(groupArraySorted(16), Float64),
    prefill_hi   AggregateFunction(groupArraySorted(16), Float64),
    decode_lo    AggregateFunction(groupArraySorted(16), Float64),
    decode_hi    AggregateFunction(groupArraySorted(16), Float64),
    ttft_hi      AggregateFunction(groupArraySorted(16), Float64),
    tpot_hi      AggregateFunction(groupArraySorted(16), Float64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYear(minute)
ORDER BY (model, input_bucket, minute)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 1000, index_granularity = 32;

CREATE MATERIALIZED VIEW IF NOT EXISTS generations_day_mv TO generations_day AS
SELECT
    toStartOfDay(toDateTime(ts, 'UTC')) AS minute,
    model,
    input_bucket,
    count() AS n,
    countIf(status = 'ok') AS ok_n,
    countIf(status = 'error') AS error_n,
    countIf(status = 'cancelled') AS cancelled_n,
    countIf(status = 'abandoned') AS abandoned_n,
    countIf(status != 'ok') AS not_ok_n,
    count(prefill_tps) AS prefill_n,
    count(decode_tps) AS decode_n,
    count(ttft_s) AS ttft_n,
    count(tpot_s) AS tpot_n,
    count(queue_s) AS queue_n,
    quantilesTDigestStateIf(0.01, 0.05, 0.5, 0.95, 0.99)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_td,
    quantilesTDigestStateIf(0.01, 0.05, 0.5, 0.95, 0.99)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_td,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(assumeNotNull(ttft_s), isNotNull(ttft_s)) AS ttft_td,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_td,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(assumeNotNull(queue_s), isNotNull(queue_s)) AS queue_td,
    groupArraySortedStateIf(16)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_lo,
    groupArraySortedStateIf(16)(-assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_hi,
    groupArraySortedStateIf(16)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_lo,
    groupArraySortedStateIf(16)(-assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_hi,
    groupArraySortedStateIf(16)(-assumeNotNull(ttft_s), isNotNull(ttft_s)) AS ttft_hi,
    groupArraySortedStateIf(16)(-assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_hi
FROM generations
GROUP BY minute, model, input_bucket;
