-- Totals per model × input bucket in a window: the demo's and `status`'s view.
SELECT model, input_bucket, count() AS n,
       countIf(status = 'ok') AS ok, countIf(status != 'ok') AS not_ok,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM generations
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
GROUP BY model, input_bucket
ORDER BY model, input_bucket
