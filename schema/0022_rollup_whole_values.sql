-- Small cells kept whole (issue #16): every tier also holds each cell's
-- prefill and decode values themselves, up to 512 of each, so an answer cell
-- of at most 512 values is computed exactly from them instead of from its
-- sketches (schema/0023_bands_rollup_whole.sql). A minute cell of a fleet
-- doing 100M generations a month holds about 116 values, and its two
-- TDigests cost far more to read and merge than its values do: 1 day at
-- 1-minute steps spent ~1 s merging 28,800 cells' sketches (BENCHMARKS.md
-- section 14). Larger cells still hold their first 512 values (a bounded
-- cost) and are answered from the sketches as before.
--
-- <phase>_values:   groupArray(512) of the cell's non-null values (merging
--                   two states keeps the first 512 of both).
-- <phase>_values_n: how many values the states hold, summed: each insert
--                   block adds least(its count, 512). An answer cell is whole
--                   exactly when this sum equals <phase>_n and <phase>_n <= 512;
--                   then every block kept all of its values and their merge
--                   fits. Cells written before this migration hold 0 and are
--                   never taken for whole, so no backfill is needed: their
--                   answer comes from the sketches as before.
--
-- The same columns and view change in every tier, so the tiers keep one
-- definition (tests/integration/test_tiers.py compares the stored SELECTs).
-- Each view is changed in place (MODIFY QUERY); a block inserted between a
-- tier's ADD COLUMN and its MODIFY QUERY gets empty states and a count of 0,
-- which only sends its cells to the sketch path.

ALTER TABLE generations_minute
    ADD COLUMN IF NOT EXISTS prefill_values   AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER tpot_hi,
    ADD COLUMN IF NOT EXISTS prefill_values_n SimpleAggregateFunction(sum, UInt64) AFTER prefill_values,
    ADD COLUMN IF NOT EXISTS decode_values    AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER prefill_values_n,
    ADD COLUMN IF NOT EXISTS decode_values_n  SimpleAggregateFunction(sum, UInt64) AFTER decode_values;

ALTER TABLE generations_minute_mv MODIFY QUERY
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
    groupArraySortedStateIf(16)(-assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_hi,
    groupArrayStateIf(512)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_values,
    least(count(prefill_tps), 512) AS prefill_values_n,
    groupArrayStateIf(512)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_values,
    least(count(decode_tps), 512) AS decode_values_n
FROM generations
GROUP BY minute, model, input_bucket;

ALTER TABLE generations_hour
    ADD COLUMN IF NOT EXISTS prefill_values   AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER tpot_hi,
    ADD COLUMN IF NOT EXISTS prefill_values_n SimpleAggregateFunction(sum, UInt64) AFTER prefill_values,
    ADD COLUMN IF NOT EXISTS decode_values    AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER prefill_values_n,
    ADD COLUMN IF NOT EXISTS decode_values_n  SimpleAggregateFunction(sum, UInt64) AFTER decode_values;

ALTER TABLE generations_hour_mv MODIFY QUERY
SELECT
    toStartOfHour(toDateTime(ts, 'UTC')) AS minute,
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
    groupArraySortedStateIf(16)(-assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_hi,
    groupArrayStateIf(512)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_values,
    least(count(prefill_tps), 512) AS prefill_values_n,
    groupArrayStateIf(512)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_values,
    least(count(decode_tps), 512) AS decode_values_n
FROM generations
GROUP BY minute, model, input_bucket;

ALTER TABLE generations_hour3
    ADD COLUMN IF NOT EXISTS prefill_values   AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER tpot_hi,
    ADD COLUMN IF NOT EXISTS prefill_values_n SimpleAggregateFunction(sum, UInt64) AFTER prefill_values,
    ADD COLUMN IF NOT EXISTS decode_values    AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER prefill_values_n,
    ADD COLUMN IF NOT EXISTS decode_values_n  SimpleAggregateFunction(sum, UInt64) AFTER decode_values;

ALTER TABLE generations_hour3_mv MODIFY QUERY
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
    groupArraySortedStateIf(16)(-assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_hi,
    groupArrayStateIf(512)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_values,
    least(count(prefill_tps), 512) AS prefill_values_n,
    groupArrayStateIf(512)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_values,
    least(count(decode_tps), 512) AS decode_values_n
FROM generations
GROUP BY minute, model, input_bucket;

ALTER TABLE generations_day
    ADD COLUMN IF NOT EXISTS prefill_values   AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER tpot_hi,
    ADD COLUMN IF NOT EXISTS prefill_values_n SimpleAggregateFunction(sum, UInt64) AFTER prefill_values,
    ADD COLUMN IF NOT EXISTS decode_values    AggregateFunction(groupArray(512), Float64) CODEC(ZSTD(1)) AFTER prefill_values_n,
    ADD COLUMN IF NOT EXISTS decode_values_n  SimpleAggregateFunction(sum, UInt64) AFTER decode_values;

ALTER TABLE generations_day_mv MODIFY QUERY
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
    groupArraySortedStateIf(16)(-assumeNotNull(tpot_s), isNotNull(tpot_s)) AS tpot_hi,
    groupArrayStateIf(512)(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS prefill_values,
    least(count(prefill_tps), 512) AS prefill_values_n,
    groupArrayStateIf(512)(assumeNotNull(decode_tps), isNotNull(decode_tps)) AS decode_values,
    least(count(decode_tps), 512) AS decode_values_n
FROM generations
GROUP BY minute, model, input_bucket;
