-- Totals per model × input bucket in a window: the demo's and `status`'s view.
-- abandoned: generations that never ended (status = 'abandoned'), split by the
-- phase they were in: abandoned_prefill (no first token, ttft_s NULL,
-- finish_reason expired_in_prefill) + abandoned_decode (ttft_s not NULL,
-- expired_in_decode) = abandoned. They are also in not_ok.
SELECT model, input_bucket, count() AS n,
       countIf(status = 'ok') AS ok, countIf(status != 'ok') AS not_ok,
       min(ts) AS first_ts, max(ts) AS last_ts,
       countIf(status = 'abandoned') AS abandoned,
       countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
       countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
FROM generations
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
GROUP BY model, input_bucket
ORDER BY model, input_bucket
