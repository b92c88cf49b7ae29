-- Per-minute rollup of `generations`, maintained by ClickHouse itself through a
-- materialized view (phasemeter/analytics picks it for long windows).
--
-- Key serves the bands/latency query shape: "one model (x input bucket) over a
-- time window, grouped by a step of >= 1 minute" -> ORDER BY (model,
-- input_bucket, minute), like the raw table; monthly partitions keep the 400
-- day TTL cheap (whole parts dropped).
--
-- Per cell (model x bucket x minute) it keeps:
-- * plain counts (SimpleAggregateFunction(sum)): rows, per status, non-null
--   samples per metric -- Grafana can read them with sum();
-- * a quantilesTDigest state per metric (prefill_tps, decode_tps, ttft_s,
--   tpot_s, queue_s), chosen after measuring DD / TDigest / BFloat16 against
--   exact (docs/analytics.md);
-- * the 16 lowest and 16 highest values (groupArraySorted, mergeable) of the
--   two throughputs and the 16 highest of ttft_s/tpot_s: a merged cell whose
--   tail rank falls inside them gets the EXACT numpy-linear percentile; only
--   dense cells fall back to the sketch, where it is accurate.
--
-- non_replicated_deduplication_window > 0 on the target table: together with
-- the sink's deduplicate_blocks_in_dependent_materialized_views=1, a retried
-- identical batch (same insert_deduplication_token) is not counted twice here
-- either (docs/delivery.md).
--
-- The view sees only rows inserted AFTER it exists; older rows are added with
-- `phasemeter analytics backfill --from --to` (sql/rollup_backfill.sql).
CREATE TABLE IF NOT EXISTS generations_minute
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
PARTITION BY toYYYYMM(minute)
ORDER BY (model, input_bucket, minute)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 1000;

-- *_hi columns hold NEGATED values (groupArraySorted keeps the smallest N).
CREATE MATERIALIZED VIEW IF NOT EXISTS generations_minute_mv TO generations_minute AS
SELECT
    toStartOfMinute(toDateTime(ts, 'UTC')) AS minute,
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
