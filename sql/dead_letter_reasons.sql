-- Dead letters by reason code in a window (`phasemeter dlq inspect`).
SELECT reason, count() AS n, min(ts) AS first_ts, max(ts) AS last_ts, any(detail) AS example
FROM dead_letters
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
GROUP BY reason
ORDER BY n DESC
