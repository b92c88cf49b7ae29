-- Backfill the per-minute rollup (schema/0003) from raw rows for a window:
-- the materialized view only sees rows inserted after it was created.
-- Idempotent per cell: a (model, input_bucket, minute) that the rollup already
-- holds is skipped, so re-running a window never double-counts. start/end must
-- be whole minutes (the CLI aligns them). Not a read: run it directly against
-- the store (`phasemeter analytics backfill`), never through the worker's
-- read-only API.
INSERT INTO generations_minute
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
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
  AND (model, input_bucket, toStartOfMinute(toDateTime(ts, 'UTC'))) NOT IN
      (SELECT model, input_bucket, minute FROM generations_minute
       WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)})
GROUP BY minute, model, input_bucket
