-- The 3-hour tier of the rollup: the same cell states as generations_minute
-- (schema/0003), one cell per model x input bucket x 3 hours (00:00, 03:00,
-- ... UTC). The auto step of a 25-75 day window is 3 h (6 h, 12 h and 1 d
-- after that: phasemeter.timeparse.auto_step), so on the hour tier each step
-- merged three hour states; here it reads one. Most of such a query's time is
-- the TDigest merge, and it grows with the states merged more than with the
-- values they hold (docs/performance/queries.md). It nests between the hour and
-- the day tier: three whole hours, and a UTC day is eight of its cells
-- (phasemeter.analytics.paths.TIER_GRAINS).
--
-- Fed from `generations` directly, NOT chained off another tier, for the
-- reason in schema/0014: the crash repair rebuilds a tier's cell from raw
-- (phasemeter/store/rollup.py), and a chained view would count it twice.
--
-- The time column is called `minute` in every tier (schema/0014). An hour
-- interval counts from the start of the (UTC) day, and a UTC day starts on a
-- multiple of 10800 s, so the cells are the epoch-aligned 3-hour blocks the
-- query's steps use (toStartOfInterval over seconds). Written with
-- toIntervalHour and no time zone argument, not toIntervalSecond(10800):
-- ClickHouse then knows the function is monotonic, so a filter on `minute`
-- over the view's SELECT reaches the raw table's key (the backfill and the
-- crash repair read one day's part, not every part: EXPLAIN indexes = 1).
--
-- Columns, states, codecs, TTL and deduplication window as in schema/0003 (read
-- the comments there); the columns and the view's SELECT must stay those of
-- the minute tier but for the time function: tests/integration/test_tiers.py
-- compares the views' SELECTs as the store holds them.
--
-- index_granularity 128 (16 days of one series per granule), for the reason
-- the hour tier gives (schema/0014): a query reads whole granules. Yearly
-- partitions as the day tier: 8 rows a day per model x bucket.
--
-- The view sees only rows inserted after this migration: `phasemeter analytics
-- backfill` fills the past, and until then the query path reads this tier from
-- its first whole cell on (phasemeter.analytics.core._tier_plan).
CREATE TABLE IF NOT EXISTS generations_hour3
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
SETTINGS non_replicated_deduplication_window = 1000, index_granularity = 128;

CREATE MATERIALIZED VIEW IF NOT EXISTS generations_hour3_mv TO generations_hour3 AS
SELECT
    toStartOfInterval(toDateTime(ts, 'UTC'), toIntervalHour(3)) AS minute,
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
